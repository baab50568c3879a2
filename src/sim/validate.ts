// The sim against the real servers: bench:agent's recorded runs (a directory per regime and seed,
// its `out.json` and `t.<regime>.<config>.run<n>.requests.jsonl`) replayed through kvctl sim with
// the `cpu` profile, each configuration on its own recorded runs, in the regime's shape: 2
// workers, page 16, the run's device pool, HiCache ratio 2 (the host pool the real server built),
// `saturated` with a `file` L3 per worker, the run's admission budget. The rows compare
// bench:agent's 3-run median recomputed tokens with the sim's over the same runs.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { readRecordedRun } from "./workload/index.js";

/** bench:agent's configuration names and the sim's. */
export const VALIDATED: Readonly<Record<string, string>> = {
  kvctl: "kvctl",
  session_radix: "session_radix",
  thunder: "thunder",
  cache_aware_adm: "cache_aware",
};

export interface RecordedConfig {
  real: number[];
  traces: string[];
  /** L3 prefetch hit tokens of bench:agent's median run (its `extra`), where recorded. */
  realStorageHit: number | null;
}

/** One regime of one bench:agent invocation (one seed). */
export interface RecordedRegime {
  dir: string;
  regime: string;
  seed: string;
  deviceTokens: number;
  l3: boolean;
  perWorker: number;
  /** kvctl's pin budget per worker in the run (blocks), where recorded. */
  pinBudgetBlocks: number | undefined;
  /** bench:agent configuration -> its runs' recomputed tokens and their trace files. */
  configs: Record<string, RecordedConfig>;
}

function lastJson(path: string): Record<string, unknown> {
  const lines = readFileSync(path, "utf8").trim().split("\n");
  return JSON.parse(lines[lines.length - 1]);
}

type Json = Record<string, unknown>;

/** The runs that completed without a failed request and left their trace file (a replay needs
 * every request's ids). */
function configRuns(dir: string, regime: string, name: string, runs: Json[]) {
  const real: number[] = [];
  const traces: string[] = [];
  runs.forEach((r, i) => {
    const trace = join(dir, `t.${regime}.${name}.run${i + 1}.requests.jsonl`);
    if (existsSync(trace) && typeof r.recomputed_tokens === "number" && !r.errors) {
      real.push(r.recomputed_tokens);
      traces.push(trace);
    }
  });
  return { real, traces };
}

/** The regimes recorded in `dir` (a run directory with out.json, or a folder of them). */
export function recordedRegimes(dir: string): RecordedRegime[] {
  if (!existsSync(join(dir, "out.json")))
    return readdirSync(dir)
      .filter((d) => existsSync(join(dir, d, "out.json")))
      .sort()
      .flatMap((d) => recordedRegimes(join(dir, d)));
  const out = lastJson(join(dir, "out.json"));
  if (out.bench !== "agent") throw new Error(`${dir}/out.json: its last line is not bench:agent's`);
  const seed = /seed(\d+)/.exec(basename(dir))?.[1] ?? "?";
  const regimes = out.regimes as Record<string, Json>;
  return Object.entries(regimes).map(([regime, r]) => {
    const configs: RecordedRegime["configs"] = {};
    for (const name of Object.keys(VALIDATED)) {
      const c = (r.configs as Record<string, Json> | undefined)?.[name];
      if (!c) continue;
      const hit = (c.extra as Json | null | undefined)?.storage_hit_tokens;
      configs[name] = {
        ...configRuns(dir, regime, name, (c.runs as Json[]) ?? []),
        realStorageHit: typeof hit === "number" ? hit : null,
      };
    }
    return {
      dir,
      regime,
      seed,
      deviceTokens: r.device_tokens as number,
      l3: r.l3 === true,
      perWorker: out.admission_requests_per_worker as number,
      pinBudgetBlocks: (r.limits as Json | undefined)?.pin_budget_blocks as number | undefined,
      configs,
    };
  });
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export interface ValidationRow {
  regime: string;
  seed: string;
  config: string;
  runs: number;
  real_median: number;
  /** max - min over bench:agent's runs. */
  real_spread: number;
  sim_median: number;
  sim_runs: number[];
  ratio: number;
  within_15pct: boolean;
  storage_hit_tokens: number;
  real_storage_hit_tokens: number | null;
}

export function rowOf(
  r: RecordedRegime,
  config: string,
  sim: readonly { recomputed: number; storageHit: number }[],
): ValidationRow {
  const real = r.configs[config].real;
  const simMedian = median(sim.map((s) => s.recomputed));
  const realMedian = median(real);
  const ratio = simMedian / realMedian;
  return {
    regime: r.regime,
    seed: r.seed,
    config,
    runs: real.length,
    real_median: realMedian,
    real_spread: Math.max(...real) - Math.min(...real),
    sim_median: simMedian,
    sim_runs: sim.map((s) => s.recomputed),
    ratio: Math.round(ratio * 1000) / 1000,
    within_15pct: Math.abs(ratio - 1) <= 0.15,
    storage_hit_tokens: median(sim.map((s) => s.storageHit)),
    real_storage_hit_tokens: r.configs[config].realStorageHit,
  };
}

/** Pairs whose real medians differ by more than both spreads, and whether the sim orders them
 * the same way. */
export function rankings(rows: readonly ValidationRow[]) {
  const out: { a: string; b: string; real: string; sim: string; agrees: boolean }[] = [];
  rows.forEach((a, i) => {
    for (const b of rows.slice(i + 1)) {
      const gap = Math.abs(a.real_median - b.real_median);
      if (gap <= Math.max(a.real_spread, b.real_spread)) continue;
      const real = a.real_median < b.real_median ? "<" : ">";
      const sim = a.sim_median < b.sim_median ? "<" : a.sim_median > b.sim_median ? ">" : "=";
      out.push({ a: a.config, b: b.config, real, sim, agrees: real === sim });
    }
  });
  return out;
}

/** The workload of one recorded run (its sessions, their ids and waits). */
export function recordedRunWorkload(trace: string, vocab: number) {
  return readRecordedRun(trace, { vocab, family: "bfcl" });
}
