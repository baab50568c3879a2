// npm run sim:validate -- --agent <dir> [--json] [--configs a,b] [--parallel n]: bench:agent's
// recorded runs (src/sim/validate.ts) replayed through kvctl sim with the `cpu` profile; prints per
// regime x seed x configuration bench:agent's median recomputed tokens and spread, the sim's, their
// ratio and whether it is within 15%, and whether the ranking agrees wherever bench:agent's
// medians differ by more than their spread. The last line with --json:
// {"bench":"sim-validate","profile":..,"rows":[..],"rankings":[..],"wall_s":..}.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { buildPatchedTree } from "../src/demo/harness.js";
import { packageRoot } from "../src/paths.js";
import { intOption } from "../src/sim/input.js";
import { pool, profileOf, runSim, SimInputError } from "../src/sim/run.js";
import type { SimWorkload } from "../src/sim/types.js";
import {
  type RecordedRegime,
  rankings,
  recordedRegimes,
  recordedRunWorkload,
  rowOf,
  VALIDATED,
  type ValidationRow,
} from "../src/sim/validate.js";

const PROFILE = "cpu/kvctl-tiny";
const PAGE = 16;

function profileVocab(): number {
  const p = join(packageRoot, "python", "kvctl_sim", "profiles", "cpu", "kvctl-tiny.json");
  return JSON.parse(readFileSync(p, "utf8")).model.vocab_size;
}

type Sim = { recomputed: number; storageHit: number };
type ReplayOptions = { tree: string; vocab: number; hostRatio: number; parallel: number };

/** One workload to replay under one configuration of one regime. */
interface Replay {
  r: RecordedRegime;
  config: string;
  workload: SimWorkload;
}

/** A row to report: a regime's configuration and the replay of each of its recorded runs. */
interface Planned {
  r: RecordedRegime;
  config: string;
  keys: string[];
}

/**
 * The replays the rows need, each once: bench:agent's runs of one seed record the same ids and
 * waits (the model decodes greedily), and the sim is deterministic, so a workload replayed once
 * stands for every run that recorded it.
 */
function plan(regimes: readonly RecordedRegime[], only: string[] | undefined, vocab: number) {
  const replays = new Map<string, Replay>();
  const rows: Planned[] = [];
  for (const r of regimes)
    for (const config of Object.keys(r.configs)) {
      const traces = r.configs[config].traces;
      if (!traces.length || (only && !only.includes(config))) continue;
      const keys = traces.map((trace) => {
        const workload = recordedRunWorkload(trace, vocab);
        const digest = createHash("sha256").update(JSON.stringify(workload.programs)).digest("hex");
        const key = `${r.regime} ${r.seed} ${config} ${digest}`;
        if (!replays.has(key)) replays.set(key, { r, config, workload });
        return key;
      });
      rows.push({ r, config, keys });
    }
  return { replays, rows };
}

async function replayOne(x: Replay, o: ReplayOptions): Promise<Sim> {
  const { r, config } = x;
  const res = await runSim({
    workload: x.workload,
    profile: PROFILE,
    workers: 2,
    seed: Number(r.seed) || 1,
    configs: [VALIDATED[config]],
    perWorker: r.perWorker,
    // kvctl's pin budget as bench:agent gave it (a quarter of device x host ratio).
    pinBudgetBlocks: r.pinBudgetBlocks,
    pool: {
      pageSize: PAGE,
      deviceTokens: r.deviceTokens,
      hostTokens: Math.round(r.deviceTokens * o.hostRatio),
    },
    storage: r.l3 ? "worker" : "none",
    parallel: 1,
    tree: o.tree,
  });
  const c = res.configs[VALIDATED[config]];
  return { recomputed: c.recomputed_tokens, storageHit: c.storage_hit_tokens ?? 0 };
}

function line(w: ValidationRow): string {
  const pct = (x: number) => `${x >= 1 ? "+" : ""}${((x - 1) * 100).toFixed(1)}%`;
  return [
    w.regime,
    w.seed,
    w.config,
    w.runs,
    `${w.real_median} (spread ${w.real_spread})`,
    `${w.sim_median} [${w.sim_runs.join(", ")}]`,
    pct(w.ratio),
    w.within_15pct ? "yes" : "no",
    `${w.real_storage_hit_tokens ?? "-"} / ${w.storage_hit_tokens}`,
  ].join(" | ");
}

type Ranking = ReturnType<typeof rankings>[number] & { regime: string; seed: string };

function printTable(rows: readonly ValidationRow[], ranks: readonly Ranking[]): void {
  console.log(
    "regime | seed | config | runs | bench:agent median (spread) | sim median [runs] | " +
      "sim vs real | within 15% | L3 hit tokens bench:agent / sim",
  );
  for (const w of rows) console.log(line(w));
  for (const x of ranks)
    console.log(
      `ranking ${x.regime} seed ${x.seed}: ${x.a} ${x.real} ${x.b} (bench:agent), ` +
        `sim ${x.sim}: ${x.agrees ? "agrees" : "DISAGREES"}`,
    );
}

/** The options, or exit 2 naming the one that is wrong. */
function options() {
  const { values: v } = parseArgs({
    options: {
      agent: { type: "string" },
      json: { type: "boolean" },
      configs: { type: "string" },
      parallel: { type: "string" },
    },
  });
  if (!v.agent) {
    console.error("sim:validate: --agent <dir>: bench:agent's recorded runs (required)");
    process.exit(2);
  }
  try {
    const parallel = intOption("--parallel", v.parallel, 2, 1);
    return { agent: v.agent, json: v.json ?? false, only: v.configs?.split(","), parallel };
  } catch (e) {
    console.error(`sim:validate: ${(e as Error).message}`);
    process.exit(2);
  }
}

/** Every planned replay, `parallel` at a time (runs share the machine); the sims by key. */
async function replayAll(planned: ReturnType<typeof plan>, o: ReplayOptions) {
  const keys = [...planned.replays.keys()];
  let done = 0;
  const sims = await pool(keys, o.parallel, async (k) => {
    const x = planned.replays.get(k) as Replay;
    const sim = await replayOne(x, o);
    const what = `${x.r.regime} seed ${x.r.seed} ${x.config}`;
    console.error(`sim:validate: ${++done}/${keys.length} replayed (${what})`);
    return sim;
  });
  return new Map(keys.map((k, i) => [k, sims[i]]));
}

async function main(): Promise<number> {
  const v = options();
  const t0 = performance.now();
  const regimes = recordedRegimes(v.agent);
  const tree = buildPatchedTree();
  try {
    const { shape } = await profileOf(PROFILE, tree.dir);
    const o: ReplayOptions = {
      tree: tree.dir,
      vocab: profileVocab(),
      hostRatio: shape.host_kv_tokens / shape.device_kv_tokens,
      parallel: v.parallel,
    };
    const planned = plan(regimes, v.only, o.vocab);
    const simOf = await replayAll(planned, o);
    const rows = planned.rows.map((p) =>
      rowOf(
        p.r,
        p.config,
        p.keys.map((k) => simOf.get(k) as Sim),
      ),
    );
    const ranks = regimes.flatMap((r) =>
      rankings(rows.filter((w) => w.regime === r.regime && w.seed === r.seed)).map((x) => ({
        regime: r.regime,
        seed: r.seed,
        ...x,
      })),
    );
    printTable(rows, ranks);
    const wall = Math.round((performance.now() - t0) / 10) / 100;
    if (v.json)
      console.log(
        JSON.stringify({
          bench: "sim-validate",
          profile: PROFILE,
          rows,
          rankings: ranks,
          wall_s: wall,
        }),
      );
    return 0;
  } catch (e) {
    if (!(e instanceof SimInputError)) throw e;
    // The cpu profile is this machine's own, written by sim:calibrate-cpu; it never ships.
    console.error(`sim:validate: ${e.message} (calibrate it here: npm run sim:calibrate-cpu)`);
    return 2;
  } finally {
    tree.remove();
  }
}

process.exitCode = await main();
