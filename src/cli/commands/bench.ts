// `kvctl bench copy`: block copy throughput between a device pool and a pinned host pool laid out
// like SGLang HiCache's, for contiguous and scattered page lists, against cudaMemcpy of one
// contiguous buffer of the same size (the link's practical limit) in the same run; and the time to
// offload/restore a session of N tokens for the given model dims. Without CUDA it runs the CPU
// twin against memcpy, and says so.
import type { LayoutKind } from "../../copy/index.js";
import { commandArgs } from "../args.js";
import type { Command } from "../command.js";

const HELP = `usage: kvctl bench copy [options]

options:
  --layout <kind>          host pool layout: layer_first (default), page_first, page_first_direct
  --device-layout <kind>   device pool layout (default: same as --layout; a different one measures
                           the layout conversion SGLang does between device and host)
  --model-dims <dims>      a preset (%PRESETS%) or
                           layers=32,heads=8,headDim=128,dtype=bf16[,kv=2]  (heads: KV heads per rank;
                           kv=1 for MLA). Default llama-3.1-8b
  --page-size <n>          tokens per page (default 64)
  --tokens <n>             session size in tokens (default 32768 with CUDA, 2048 for the CPU twin)
  --backend <b>            auto (default: cuda when a device is usable, else cpu), cuda, cpu
  --iters <n>              timed repetitions, best taken (default 3)
  --device <n>             CUDA device (default 0)
  --json                   print one JSON object of the figures as the last line
  -h, --help               this text`;

const KINDS: LayoutKind[] = ["layer_first", "page_first", "page_first_direct"];

export interface ModelDims {
  name: string;
  layers: number;
  heads: number;
  headDim: number;
  dtype: string;
  kv: 1 | 2;
}

export const PRESETS: Record<string, Omit<ModelDims, "name">> = {
  "llama-3.1-8b": { layers: 32, heads: 8, headDim: 128, dtype: "bf16", kv: 2 },
  "llama-3.1-70b-tp8": { layers: 80, heads: 1, headDim: 128, dtype: "bf16", kv: 2 },
  "qwen2.5-7b": { layers: 28, heads: 4, headDim: 128, dtype: "bf16", kv: 2 },
  "qwen3-32b-tp4": { layers: 64, heads: 2, headDim: 128, dtype: "bf16", kv: 2 },
  "deepseek-v3-mla": { layers: 61, heads: 1, headDim: 576, dtype: "bf16", kv: 1 },
  tiny: { layers: 2, heads: 2, headDim: 64, dtype: "fp16", kv: 2 },
};

export function parseModelDims(s: string): ModelDims {
  const preset = PRESETS[s.toLowerCase()];
  if (preset) return { name: s.toLowerCase(), ...preset };
  const m: Record<string, string> = {};
  for (const part of s.split(",")) {
    const [k, v] = part.split("=").map((x) => x.trim());
    if (!k || v === undefined)
      throw new Error(
        `--model-dims: '${part}' is not key=value (or a preset: ${Object.keys(PRESETS).join(", ")})`,
      );
    m[k.toLowerCase().replace(/[-_]/g, "")] = v;
  }
  const int = (k: string, def?: number): number => {
    const v = m[k.toLowerCase()];
    if (v === undefined) {
      if (def !== undefined) return def;
      throw new Error(`--model-dims: ${k}= is required`);
    }
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1)
      throw new Error(`--model-dims: ${k} must be a positive integer (got '${v}')`);
    return n;
  };
  const kv = int("kv", 2);
  if (kv !== 1 && kv !== 2) throw new Error("--model-dims: kv must be 1 or 2");
  return {
    name: "custom",
    layers: int("layers"),
    heads: m.kvheads !== undefined ? int("kvheads") : int("heads"),
    headDim: int("headdim"),
    dtype: m.dtype ?? "bf16",
    kv,
  };
}

function positive(v: string | undefined, name: string, def: number): number {
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`${name} must be a positive integer (got '${v}')`);
  return n;
}

function shuffled(n: number, seed: number): number[] {
  let x = seed >>> 0 || 1;
  const next = () => ((x ^= x << 13), (x ^= x >>> 17), (x ^= x << 5), x >>> 0);
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = next() % (i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

const MiB = 2 ** 20;

export interface CopyBenchResult {
  backend: "cuda" | "cpu";
  note: string;
  device: string | null;
  model: ModelDims;
  pageSize: number;
  layout: LayoutKind;
  deviceLayout: LayoutKind;
  pageBytes: number;
  tokens: number;
  pages: number;
  bytes: number;
  iters: number;
  gbps: {
    d2h: { contiguous: number; scattered: number; baseline: number };
    h2d: { contiguous: number; scattered: number; baseline: number };
  };
  session: { tokens: number; offloadMs: number; restoreMs: number; verified: boolean };
  plan: { contiguousRuns: number; scatteredKernelPages: number; granularity: string };
}

export interface CopyBenchOptions {
  layout?: LayoutKind;
  deviceLayout?: LayoutKind;
  model?: ModelDims;
  pageSize?: number;
  tokens?: number;
  backend?: "auto" | "cuda" | "cpu";
  iters?: number;
  device?: number;
  log?: (line: string) => void;
}

type CopyModule = typeof import("../../copy/index.js");
type Pool = ReturnType<CopyModule["createPool"]>;

/** What one run of the copy bench measures on: backend, model and layouts, session size. */
function copySetup(copy: CopyModule, opts: CopyBenchOptions) {
  const cuda = copy.cudaStatus();
  const wanted = opts.backend ?? "auto";
  if (wanted === "cuda" && !cuda.available) throw new Error(`--backend cuda: ${cuda.reason}`);
  const backend: "cuda" | "cpu" = wanted === "cpu" ? "cpu" : cuda.available ? "cuda" : "cpu";
  const note =
    backend === "cuda"
      ? "CUDA: device pool (cudaMalloc) <-> pinned host pool (cudaHostAlloc), baseline cudaMemcpyAsync of one contiguous buffer"
      : `CPU twin: host pool <-> host pool, baseline memcpy of one contiguous buffer${wanted === "cpu" ? "" : ` (no CUDA: ${cuda.reason})`}`;
  const model = opts.model ?? { name: "llama-3.1-8b", ...PRESETS["llama-3.1-8b"] };
  const pageSize = opts.pageSize ?? 64;
  const layout = opts.layout ?? "layer_first";
  const dims = {
    pageSize,
    layers: model.layers,
    kv: model.kv,
    heads: model.heads,
    headDim: model.headDim,
    dtypeSize: copy.dtypeSize(model.dtype),
  };
  const pageBytes = copy.layoutInfo({ layout, ...dims }).pageBytes;
  const tokens = opts.tokens ?? (backend === "cuda" ? 32768 : 2048);
  const pages = Math.ceil(tokens / pageSize);
  const device = backend === "cuda" ? (opts.device ?? 0) : undefined;
  const devName = backend === "cuda" ? (cuda.info.devices[device ?? 0]?.name ?? null) : null;
  return {
    backend,
    note,
    model,
    pageSize,
    layout,
    deviceLayout: opts.deviceLayout ?? layout,
    iters: opts.iters ?? 3,
    dims,
    pageBytes,
    tokens,
    pages,
    bytes: pages * pageBytes,
    device,
    devName,
  };
}

type CopySetup = ReturnType<typeof copySetup>;

function logSetup(s: CopySetup, log: (line: string) => void): void {
  const { model } = s;
  log(`kvctl bench copy — ${s.note}`);
  if (s.devName) log(`device #${s.device}: ${s.devName}`);
  log(
    `model ${model.name}: layers ${model.layers}, kv heads ${model.heads}, head dim ${model.headDim}, ${model.dtype}, kv ${model.kv}; ` +
      `page ${s.pageSize} tokens = ${(s.pageBytes / MiB).toFixed(2)} MiB; layout ${s.deviceLayout} (device) <-> ${s.layout} (host)`,
  );
  log(
    `session ${s.tokens} tokens = ${s.pages} pages = ${(s.bytes / MiB).toFixed(1)} MiB per transfer, best of ${s.iters}`,
  );
}

export async function benchCopy(opts: CopyBenchOptions): Promise<CopyBenchResult> {
  const copy = await import("../../copy/index.js");
  const s = copySetup(copy, opts);
  logSetup(s, opts.log ?? (() => {}));
  const devKind = s.backend === "cuda" ? "cuda-device" : "cpu";
  const hostKind = s.backend === "cuda" ? "cuda-pinned" : "cpu";
  // Device pool twice the session (scattered pages spread over it), host pool the session's size.
  const dev = copy.createPool({
    kind: devKind,
    layout: { layout: s.deviceLayout, ...s.dims },
    pages: 2 * s.pages,
    device: s.device,
  });
  const host = copy.createPool({
    kind: hostKind,
    layout: { layout: s.layout, ...s.dims },
    pages: s.pages,
    device: s.device,
  });
  try {
    await dev.fill(1);
    await host.fill(2);
    const scatteredDev = shuffled(2 * s.pages, 7).slice(0, s.pages);
    const scatteredHost = shuffled(s.pages, 11);
    const { gbps, plan } = await measureCopies(copy, s, dev, host, scatteredDev, scatteredHost);
    const session = await measureSession(copy, s, dev, host, scatteredDev, scatteredHost);
    return resultOf(s, { gbps, session, plan });
  } finally {
    dev.free();
    host.free();
  }
}

/** The setup as the result reports it, with what was measured on it. */
function resultOf(
  s: CopySetup,
  measured: Pick<CopyBenchResult, "gbps" | "session" | "plan">,
): CopyBenchResult {
  const { backend, note, devName, model, pageSize, layout, deviceLayout, pageBytes } = s;
  const { tokens, pages, bytes, iters } = s;
  return {
    backend,
    note,
    device: devName,
    model,
    pageSize,
    layout,
    deviceLayout,
    pageBytes,
    tokens,
    pages,
    bytes,
    iters,
    ...measured,
  };
}

/** Best-of-iters GB/s of each direction and pattern, against one contiguous memcpy. */
async function measureCopies(
  copy: CopyModule,
  s: CopySetup,
  dev: Pool,
  host: Pool,
  scatteredDev: number[],
  scatteredHost: number[],
): Promise<Pick<CopyBenchResult, "gbps" | "plan">> {
  const seq = Array.from({ length: s.pages }, (_, i) => i);
  const best = async (fn: () => Promise<unknown>): Promise<number> => {
    await fn(); // warm-up
    let b = Infinity;
    for (let i = 0; i < s.iters; i++) {
      const t0 = process.hrtime.bigint();
      await fn();
      b = Math.min(b, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    return b;
  };
  const gb = (secs: number) => s.bytes / secs / 1e9;
  const stC = await copy.copyPages(dev, host, seq, seq);
  const stS = await copy.copyPages(dev, host, scatteredDev, scatteredHost);
  const d2hC = await best(() => copy.copyPages(dev, host, seq, seq));
  const d2hS = await best(() => copy.copyPages(dev, host, scatteredDev, scatteredHost));
  const h2dC = await best(() => copy.copyPages(host, dev, seq, seq));
  const h2dS = await best(() => copy.copyPages(host, dev, scatteredHost, scatteredDev));
  const baseD2h = await copy.memcpyBaseline(s.backend, s.bytes, "d2h", s.iters, s.device ?? 0);
  const baseH2d =
    s.backend === "cpu"
      ? baseD2h
      : await copy.memcpyBaseline(s.backend, s.bytes, "h2d", s.iters, s.device ?? 0);
  return {
    gbps: {
      d2h: { contiguous: gb(d2hC), scattered: gb(d2hS), baseline: gb(baseD2h) },
      h2d: { contiguous: gb(h2dC), scattered: gb(h2dS), baseline: gb(baseH2d) },
    },
    plan: {
      contiguousRuns: stC.runs,
      scatteredKernelPages: stS.kernelPages,
      granularity: stC.granularity,
    },
  };
}

/**
 * A session: its pages scattered over the device pool, offloaded to host slots, the device pages
 * then reused (overwritten), and restored to other device pages; verified by digest.
 */
async function measureSession(
  copy: CopyModule,
  s: CopySetup,
  dev: Pool,
  host: Pool,
  scatteredDev: number[],
  scatteredHost: number[],
): Promise<CopyBenchResult["session"]> {
  await dev.fill(3);
  const want = await copy.digests(dev, scatteredDev);
  let t0 = process.hrtime.bigint();
  await copy.gather(dev, host, scatteredDev, scatteredHost);
  const offloadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  await dev.fill(4);
  const restoreTo = shuffled(2 * s.pages, 13).slice(0, s.pages);
  t0 = process.hrtime.bigint();
  await copy.scatter(host, dev, scatteredHost, restoreTo);
  const restoreMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const got = await copy.digests(dev, restoreTo);
  return { tokens: s.tokens, offloadMs, restoreMs, verified: got.every((d, i) => d === want[i]) };
}

export function formatCopyBench(r: CopyBenchResult): string[] {
  const row = (dir: string, pat: string, g: number, base: number) =>
    `${dir.padEnd(5)} ${pat.padEnd(20)} ${g.toFixed(2).padStart(8)}  ${((100 * g) / base).toFixed(0).padStart(5)}%  ${((r.bytes / g / 1e9) * 1e3).toFixed(2).padStart(9)}`;
  const baseName = r.backend === "cuda" ? "cudaMemcpy (1 buf)" : "memcpy (1 buf)";
  return [
    `dir   pattern                  GB/s  of base         ms`,
    row("d2h", "contiguous pages", r.gbps.d2h.contiguous, r.gbps.d2h.baseline),
    row("d2h", "scattered pages", r.gbps.d2h.scattered, r.gbps.d2h.baseline),
    row("d2h", baseName, r.gbps.d2h.baseline, r.gbps.d2h.baseline),
    row("h2d", "contiguous pages", r.gbps.h2d.contiguous, r.gbps.h2d.baseline),
    row("h2d", "scattered pages", r.gbps.h2d.scattered, r.gbps.h2d.baseline),
    row("h2d", baseName, r.gbps.h2d.baseline, r.gbps.h2d.baseline),
    `plan: contiguous list -> ${r.plan.contiguousRuns} coalesced run(s); scattered list -> ${r.plan.scatteredKernelPages} kernel pages; chunking ${r.plan.granularity}`,
    `session of ${r.session.tokens} tokens: offload ${r.session.offloadMs.toFixed(2)} ms, restore ${r.session.restoreMs.toFixed(2)} ms, round trip ${r.session.verified ? "verified by digest" : "DIGEST MISMATCH"}`,
  ];
}

const COPY_OPTIONS = {
  layout: { type: "string" },
  "device-layout": { type: "string" },
  "model-dims": { type: "string" },
  "page-size": { type: "string" },
  tokens: { type: "string" },
  backend: { type: "string" },
  iters: { type: "string" },
  device: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

async function copyMain(argv: string[]): Promise<number> {
  const parsed = commandArgs(argv, {
    name: "kvctl bench copy",
    options: COPY_OPTIONS,
    help: HELP.replace("%PRESETS%", Object.keys(PRESETS).join(", ")),
  });
  if (typeof parsed === "number") return parsed;
  const { values } = parsed;
  let opts: Parameters<typeof benchCopy>[0];
  try {
    const kind = (v: string | undefined, flag: string): LayoutKind | undefined => {
      if (v === undefined) return undefined;
      if (!KINDS.includes(v as LayoutKind))
        throw new Error(`${flag} must be one of ${KINDS.join(", ")} (got '${v}')`);
      return v as LayoutKind;
    };
    const backend = values.backend ?? "auto";
    if (!["auto", "cuda", "cpu"].includes(backend))
      throw new Error(`--backend must be auto, cuda or cpu (got '${backend}')`);
    opts = {
      layout: kind(values.layout, "--layout"),
      deviceLayout: kind(values["device-layout"], "--device-layout"),
      model: values["model-dims"] ? parseModelDims(values["model-dims"]) : undefined,
      pageSize: positive(values["page-size"], "--page-size", 64),
      tokens: values.tokens === undefined ? undefined : positive(values.tokens, "--tokens", 1),
      backend: backend as "auto" | "cuda" | "cpu",
      iters: positive(values.iters, "--iters", 3),
      device: values.device === undefined ? undefined : Number(values.device),
    };
  } catch (err) {
    console.error(`kvctl bench copy: ${err instanceof Error ? err.message : String(err)}`);
    return 2;
  }
  try {
    const r = await benchCopy({ ...opts, log: (l) => console.log(l) });
    for (const l of formatCopyBench(r)) console.log(l);
    if (values.json) console.log(JSON.stringify(r));
    return r.session.verified ? 0 : 1;
  } catch (err) {
    console.error(`kvctl bench copy: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}

const SUBCOMMANDS: Record<string, (argv: string[]) => Promise<number>> = { copy: copyMain };

export const command: Command = {
  summary:
    "benchmarks: `bench copy` (KV block copy GB/s vs cudaMemcpy/memcpy, session offload/restore)",
  async run(argv: string[]): Promise<number> {
    const [sub, ...rest] = argv;
    if (!sub || sub === "-h" || sub === "--help") {
      console.log(
        `usage: kvctl bench <${Object.keys(SUBCOMMANDS).join("|")}> [options]\n\n${HELP.replace("%PRESETS%", Object.keys(PRESETS).join(", "))}`,
      );
      return sub ? 0 : 2;
    }
    const fn = SUBCOMMANDS[sub];
    if (!fn) {
      console.error(
        `kvctl bench: unknown benchmark '${sub}' (have: ${Object.keys(SUBCOMMANDS).join(", ")})`,
      );
      return 2;
    }
    return fn(rest);
  },
};
