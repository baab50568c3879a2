// `npm run sim:calibrate-cpu [-- --repeats N] [--out FILE] [--smoke]`: measures the `cpu`
// profile of `kvctl sim` (python/kvctl_sim/profiles/cpu/kvctl-tiny.json) on this machine's real
// patched SGLang 0.5.23 CPU servers, started exactly as bench:agent starts its workers (its model,
// its flags, `startWorker`): prefill time per batch shape (batch, extend, prefix) and decode step
// time per batch size and context, from the server's own clock (measure.ts); the KV links (host
// pool and `file` L3) timed on the code the server runs (links.py); SGLang's own settings and KV
// geometry read from a server of bench:agent's `saturated` shape. docs/sim.md "The cpu profile"
// says how it is measured and how noisy it is.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { packageRoot, venvPython } from "../../src/paths.js";
import { agentModel, startWorker } from "../agent/stack.js";
import { feasible, median, prefillTable, spread } from "./fit.js";
import { generateBatch, Tokens } from "./measure.js";
import { profileDoc, render } from "./profile-doc.js";
import { serverFacts, type ServerFacts } from "./server-facts.js";
import { sweepDecode, sweepPrefill } from "./sweep.js";

const argv = process.argv.slice(2);
const SMOKE = argv.includes("--smoke");
const opt = (name: string, dflt: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const REPEATS = Number(opt("repeats", SMOKE ? "1" : "5"));
// Each repeat is one sweep over the grid (sweep.ts).
if (!Number.isInteger(REPEATS) || REPEATS < 1)
  throw new Error(`--repeats: expected an integer >= 1, got ${opt("repeats", "")}`);
const OUT = opt(
  "out",
  join(packageRoot, "python", "kvctl_sim", "profiles", "cpu", "kvctl-tiny.json"),
);
const log = (s: string) => process.stderr.write(`${s}\n`);

/** The grid: bench:agent's prompts reach about 7K tokens in pools of 8-10K; admission keeps batches small. */
const GRID = SMOKE
  ? {
      prefill: { batch: [1, 2], extend: [16, 256], prefix: [0, 256] },
      decode: { batch: [1, 2], context: [256, 512] },
      steps: 8,
    }
  : {
      prefill: {
        batch: [1, 2, 4],
        extend: [16, 256, 1024, 2048, 4096],
        prefix: [0, 1024, 2048, 4096, 6144],
      },
      decode: { batch: [1, 2, 4, 8], context: [256, 1024, 2048, 4096, 8192] },
      steps: 32,
    };

const BENCH_SHAPE = { pageSize: 16, hostRatio: 2 };
/** bench:agent's saturated workers: the profile's pool sizes and SGLang settings are theirs. */
const SATURATED = { deviceTokens: 8192, storage: true };

async function prefillGrid(url: string, chunk: number, tok: Tokens) {
  const { batch, extend, prefix } = GRID.prefill;
  const cells = batch.flatMap((b) =>
    extend.flatMap((e) => prefix.map((p) => ({ batch: b, extend: e, prefix: p }))),
  );
  const samples = await sweepPrefill(
    cells.filter((c) => feasible(c, chunk)),
    { url, tok, sweeps: REPEATS, seed: 1, log },
  );
  const measured = new Map<string, number>();
  const spreads: number[] = [];
  for (const [k, xs] of samples) {
    const ms = xs.map((x) => x.ms);
    measured.set(k, median(ms));
    spreads.push(spread(ms));
    log(`  prefill ${k}: ${ms.map((x) => x.toFixed(1)).join(" ")} ms`);
  }
  const overheadMs = median([...samples.values()].flatMap((xs) => xs.map((x) => x.overheadMs)));
  return { measured, spreads, overheadMs };
}

async function decodeGrid(url: string, tok: Tokens) {
  const { batch, context } = GRID.decode;
  const cells = batch.flatMap((b) => context.map((c) => ({ batch: b, context: c })));
  const samples = await sweepDecode(cells, GRID.steps, {
    url,
    tok,
    sweeps: REPEATS,
    seed: 2,
    log,
  });
  const spreads = [...samples.values()].map(spread);
  for (const [k, xs] of samples)
    log(`  decode ${k}: ${xs.map((x) => x.toFixed(2)).join(" ")} ms/step`);
  const ms = batch.map((b) =>
    context.map((c) => +median(samples.get(`${b}/${c}`) ?? []).toFixed(3)),
  );
  return { ms, spreads };
}

interface LinkFit {
  gb_per_s: number;
  latency_us: number;
  samples: [number, number][];
}

function measureLinks(f: ServerFacts, model: Record<string, number>): Record<string, LinkFit> {
  const args = [
    join(packageRoot, "bench", "sim-cpu", "links.py"),
    ...["--layers", model.num_hidden_layers, "--kv-heads", model.num_key_value_heads],
    ...["--head-dim", model.head_dim, "--page", f.page_size, "--dtype", f.kv_dtype],
    ...["--device-tokens", f.device_kv_tokens, "--host-tokens", f.host_kv_tokens],
    ...["--repeats", SMOKE ? 1 : 7],
  ].map(String);
  const out = execFileSync(venvPython, args, {
    encoding: "utf8",
    env: { ...process.env, PYTHONPATH: join(packageRoot, "python"), PYTHONWARNINGS: "ignore" },
  });
  return JSON.parse(out.trim().split("\n").pop() as string);
}

const LINK_NOTE: Record<string, string> = {
  h2d: "host pool -> CPU 'device' pool: transfer_kv_direct per layer (HiCache load_to_device_per_layer, io backend direct, layer_first)",
  d2h: "CPU 'device' pool -> host pool: transfer_kv_direct over every layer (HiCache backup_from_device_all_layer)",
  storage_read: "SGLang's HiCacheFile batch_get, one file per page, this machine's disk",
  storage_write: "SGLang's HiCacheFile batch_set, one file per page (write to a temp file, rename)",
};

/** The SGLang settings and geometry of a `saturated` worker: its log line and its own counters. */
async function saturatedFacts(model: string, kvElements: number): Promise<ServerFacts> {
  const w = await startWorker(
    { model, ...BENCH_SHAPE, ...SATURATED },
    [],
    undefined,
    "calibrate-saturated",
  );
  try {
    // Enough distinct pages to evict and back up: the counters give the bytes per KV token.
    const tok = new Tokens(900_000);
    for (let i = 0; i < 6; i++) await generateBatch(w.baseUrl, [tok.take(2048)], 1);
    return await serverFacts(w, kvElements);
  } finally {
    await w.stop();
  }
}

async function grids(model: string, chunk: number) {
  const w = await startWorker(
    { model, ...BENCH_SHAPE, deviceTokens: 262_144, storage: false },
    [],
    undefined,
    "calibrate",
  );
  try {
    const tok = new Tokens(1);
    await generateBatch(w.baseUrl, [tok.take(512)], 4);
    const prefill = await prefillGrid(w.baseUrl, chunk, tok);
    const decode = await decodeGrid(w.baseUrl, tok);
    return { prefill, decode };
  } finally {
    await w.stop();
  }
}

async function main(): Promise<void> {
  const model = agentModel();
  const raw = JSON.parse(readFileSync(join(model, "config.json"), "utf8"));
  const cfg = { ...raw, head_dim: raw.head_dim ?? raw.hidden_size / raw.num_attention_heads };
  const load0 = loadavg();
  const t0 = performance.now();
  log(
    `cpu profile: ${cpus().length} x ${cpus()[0]?.model}, load ${load0.map((x) => x.toFixed(1))}`,
  );
  const kvElements = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim;
  const facts = await saturatedFacts(model, kvElements);
  log(`  saturated worker: ${JSON.stringify({ ...facts, command: undefined })}`);
  const { prefill, decode } = await grids(model, facts.chunked_prefill_size);
  const links = measureLinks(facts, cfg);
  const table = prefillTable(GRID.prefill, prefill.measured);
  const axes = { prefill: GRID.prefill, decode: GRID.decode };
  const profile = profileDoc({
    ...{ cfg, facts, axes, prefill, decode, links, table, load0, t0 },
    ...{ repeats: REPEATS, steps: GRID.steps, linkNotes: LINK_NOTE },
  });
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, render(profile));
  log(`wrote ${OUT} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  log(
    `  prefill spread median ${profile.source.prefill_spread.median}, decode ${profile.source.decode_spread.median}; model residual median ${profile.source.prefill_model.residual.median}`,
  );
}

await main();
