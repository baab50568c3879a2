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
import { profileOf, runSim } from "../src/sim/run.js";
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

/** Replays already run, by configuration and workload: bench:agent's runs of one seed record the
 * same ids and waits (the model decodes greedily), and the sim is deterministic, so a workload
 * replayed once stands for every run that recorded it. */
const replayed = new Map<string, Promise<Sim>>();

function replay(
  r: RecordedRegime,
  config: string,
  o: { tree: string; vocab: number; hostRatio: number; parallel: number },
) {
  return Promise.all(
    r.configs[config].traces.map((trace) => {
      const workload = recordedRunWorkload(trace, o.vocab);
      const key = `${r.regime} ${config} ${createHash("sha256").update(JSON.stringify(workload.programs)).digest("hex")}`;
      let sim = replayed.get(key);
      if (!sim) {
        sim = replayOne(r, config, workload, o);
        replayed.set(key, sim);
      }
      return sim;
    }),
  ).then((sims) => rowOf(r, config, sims));
}

async function replayOne(
  r: RecordedRegime,
  config: string,
  workload: SimWorkload,
  o: { tree: string; vocab: number; hostRatio: number; parallel: number },
): Promise<Sim> {
  // Runs share the machine: at most `parallel` replays at once.
  await slot(0, o.parallel);
  try {
    const res = await runSim({
      workload,
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
  } finally {
    release();
  }
}

let running = 0;
const waiters: (() => void)[] = [];
async function slot(_i: number, n: number): Promise<void> {
  while (running >= n) await new Promise<void>((res) => waiters.push(res));
  running++;
}
function release(): void {
  running--;
  waiters.shift()?.();
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
    "regime | seed | config | runs | bench:agent median (spread) | sim median [runs] | sim vs real | within 15% | L3 hit tokens bench:agent / sim",
  );
  for (const w of rows) console.log(line(w));
  for (const x of ranks)
    console.log(
      `ranking ${x.regime} seed ${x.seed}: ${x.a} ${x.real} ${x.b} (bench:agent), sim ${x.sim}: ${x.agrees ? "agrees" : "DISAGREES"}`,
    );
}

async function main(): Promise<void> {
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
  const t0 = performance.now();
  const only = v.configs?.split(",");
  const regimes = recordedRegimes(v.agent);
  const tree = buildPatchedTree();
  try {
    const { shape } = await profileOf(PROFILE, tree.dir);
    const o = {
      tree: tree.dir,
      vocab: profileVocab(),
      hostRatio: shape.host_kv_tokens / shape.device_kv_tokens,
      parallel: Number(v.parallel ?? 2),
    };
    // Every replay is queued at once; `parallel` of them run at a time.
    const groups = await Promise.all(
      regimes.map(async (r) => {
        const names = Object.keys(r.configs).filter(
          (c) => r.configs[c].traces.length && (!only || only.includes(c)),
        );
        const rows = await Promise.all(names.map((c) => replay(r, c, o)));
        for (const w of rows) console.error(line(w));
        return { regime: r, rows };
      }),
    );
    const rows = groups.flatMap((g) => g.rows);
    const ranks = groups.flatMap((g) =>
      rankings(g.rows).map((x) => ({ regime: g.regime.regime, seed: g.regime.seed, ...x })),
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
  } finally {
    tree.remove();
  }
}

await main();
