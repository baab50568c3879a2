// runSim: one workload through every configuration (and the oracle) on the same fleet shape,
// the figures of each (SimRunResult). Configurations run `parallel` at a time, each on one of as
// many fleet processes; each is deterministic in the seed, so the result does not depend on how
// many ran at once or which process ran it.
import { agentPolicies, type ConfigOutcome, type ConfigTask } from "./config-run.js";
import { CONFIG_NAMES, configNamed, type SimConfigSpec } from "./configs.js";
import type { ConfigRun, RequestRecord } from "./engine.js";
import { FleetClient, FleetError } from "./fleet-client.js";
import {
  type FleetShape,
  type ProfileShape,
  STORAGE_MODES,
  type StorageMode,
} from "./fleet-shape.js";
import { FleetProcesses, type Lane } from "./lanes.js";
import { configResult } from "./metrics.js";
import { oracleCached } from "./oracle.js";
import type { SimConfigResult, SimProfileRef, SimRunResult, SimWorkload } from "./types.js";
import { segmentsLength } from "./workload/index.js";

export { agentPolicies, FleetProcesses };
export { type FleetShape, type ProfileShape, STORAGE_MODES, type StorageMode };

export interface PoolOverrides {
  pageSize?: number;
  deviceTokens?: number;
  /** Host pool tokens (0: no HiCache host tier). */
  hostTokens?: number;
}

export interface SimRunOptions {
  workload: SimWorkload;
  profile: string;
  workers: number;
  seed: number;
  /** Configurations to run (default: all of CONFIG_NAMES). */
  configs?: readonly string[];
  /** The admission budget every configuration gets: requests (or programs) per worker. */
  perWorker?: number;
  pool?: PoolOverrides;
  /** The agent policy's pin budget per worker, in blocks (default: half the host pool). */
  pinBudgetBlocks?: number;
  /** HiCache's L3 (default none; it needs the host tier). */
  storage?: StorageMode;
  /** Goodput's TTFT p90 target (ms, default 2000). */
  ttftTargetMs?: number;
  /** Configurations run at once (default 2). */
  parallel?: number;
  /** The patched SGLang tree (built for the run when absent). */
  tree: string;
  /** Fleet processes to run on, kept open for the caller's next run (default: the run's own). */
  fleets?: FleetProcesses;
  /** The run's own lanes each in a worker thread (lanes.ts; default: this thread). */
  threads?: boolean;
  progress?: (line: string) => void;
  log?: (line: string) => void;
}

export class SimInputError extends Error {
  override name = "SimInputError";
}

function inputCheck<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw new SimInputError(e instanceof Error ? e.message : String(e));
  }
}

/** The profile's reference and shape (an unknown GPU or model: the names that exist). */
export async function readProfile(
  name: string,
  fleet: Pick<Lane, "profile">,
): Promise<{ ref: SimProfileRef; shape: ProfileShape }> {
  try {
    return (await fleet.profile(name)) as { ref: SimProfileRef; shape: ProfileShape };
  } catch (e) {
    if (e instanceof FleetError) throw new SimInputError(e.message.replace(/^fleet: \w+: /, ""));
    throw e;
  }
}

/** A profile's reference and shape, read by a fleet process started for it. */
export async function profileOf(
  name: string,
  tree: string,
): Promise<{ ref: SimProfileRef; shape: ProfileShape }> {
  const fleet = new FleetClient({ tree });
  try {
    return await readProfile(name, fleet);
  } finally {
    await fleet.close();
  }
}

export function fleetShape(
  shape: ProfileShape,
  o: PoolOverrides = {},
  storage: StorageMode = "none",
): FleetShape {
  const f = {
    pageSize: o.pageSize ?? shape.page_size,
    deviceTokens: o.deviceTokens ?? shape.device_kv_tokens,
    hostTokens: o.hostTokens ?? shape.host_kv_tokens,
    chunkedPrefillSize: shape.chunked_prefill_size,
    storage,
  };
  if (storage !== "none" && f.hostTokens <= 0)
    throw new SimInputError(
      `--storage ${storage}: an L3 needs HiCache's host tier (host tokens > 0)`,
    );
  return f;
}

/** Refuses a workload one of whose requests a worker's device pool cannot hold, naming it. */
export function checkFits(workload: SimWorkload, f: FleetShape): void {
  for (const p of workload.programs)
    p.requests.forEach((r, n) => {
      const need = segmentsLength(r.prompt) + segmentsLength(r.output);
      if (need + f.pageSize > f.deviceTokens)
        throw new SimInputError(
          `program ${p.id} request ${n}: ${need} tokens (prompt and output) do not fit a worker's device pool of ${f.deviceTokens} tokens`,
        );
      if (segmentsLength(r.output) < 1)
        throw new SimInputError(`program ${p.id} request ${n}: output: at least 1 token`);
    });
}

/** `f` over `items`, `n` at a time; `f` is told which of the `n` lanes runs it. */
export async function pool<T, R>(
  items: readonly T[],
  n: number,
  f: (x: T, lane: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const lane = async (k: number) => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i], k);
    }
  };
  const lanes = Math.max(1, Math.min(n, items.length));
  await Promise.all(Array.from({ length: lanes }, (_, k) => lane(k)));
  return out;
}

/** `pool` over the configurations, those running kvctl's command layer started first: their
 * workers' command handlers and the agent policy make them the longest, so the others fill the
 * remaining lanes beside them and the run ends near total CPU / lanes, not a long lane's length
 * after the rest. The results come back in the jobs' own order. */
async function costliestFirst<R>(
  specs: readonly SimConfigSpec[],
  n: number,
  f: (spec: SimConfigSpec, lane: number) => Promise<R>,
): Promise<R[]> {
  const order = specs.map((_, i) => i);
  order.sort((a, b) => Number(specs[b].kvctl) - Number(specs[a].kvctl));
  const ran = await pool(order, n, (i, lane) => f(specs[i], lane));
  const out: R[] = new Array(specs.length);
  order.forEach((i, k) => {
    out[i] = ran[k];
  });
  return out;
}

export async function runSim(o: SimRunOptions): Promise<SimRunResult> {
  if (o.fleets) return await runOn(o, o.fleets);
  const fleets = new FleetProcesses({ tree: o.tree, log: o.log, threads: o.threads });
  try {
    return await runOn(o, fleets);
  } finally {
    await fleets.close();
  }
}

/** Each configuration as a lane runs it (config-run.ts): the same admission budget for all. */
function configTask(
  o: SimRunOptions,
  name: string,
  shape: ProfileShape,
  f: FleetShape,
  ref: SimProfileRef,
): ConfigTask {
  return {
    name,
    workload: o.workload,
    profile: o.profile,
    workers: o.workers,
    seed: o.seed,
    perWorker: o.perWorker ?? 32,
    pinBudgetBlocks: o.pinBudgetBlocks,
    shape,
    fleet: f,
    ref,
  };
}

async function runOn(o: SimRunOptions, fleets: FleetProcesses): Promise<SimRunResult> {
  const t0 = performance.now();
  const { ref, shape } = await readProfile(o.profile, fleets.get(0));
  const f = fleetShape(shape, o.pool, o.storage);
  checkFits(o.workload, f);
  const specs = (o.configs ?? CONFIG_NAMES).map((name) => inputCheck(() => configNamed(name)));
  const metricsOpts = { tp: ref.tp, ttftTargetMs: o.ttftTargetMs ?? 2000 };
  const runs: ConfigOutcome[] = await costliestFirst(specs, o.parallel ?? 2, (spec, lane) =>
    fleets.get(lane).run(configTask(o, spec.name, shape, f, ref), o.progress, o.log),
  );
  const configs: Record<string, SimConfigResult> = {};
  let simulated = 0;
  runs.forEach(({ run, commands }, i) => {
    o.log?.(
      `sim ${specs[i].name}: ${run.advances} round trips (its fleet process: ${run.fleetCpuS.toFixed(1)} CPU s so far)`,
    );
    configs[specs[i].name] = configResult(run, commands, metricsOpts);
    simulated = Math.max(simulated, run.simulatedS);
  });
  let requests = 0;
  for (const p of o.workload.programs) requests += p.requests.length;
  return {
    bench: "sim",
    wall_s: Math.round((performance.now() - t0) / 10) / 100,
    simulated_s: Math.round(simulated * 1000) / 1000,
    workers: o.workers,
    programs: o.workload.programs.length,
    requests,
    seed: o.seed,
    profile: ref,
    workload: o.workload.name,
    configs,
    oracle: await oracleResult(o, f, runs, metricsOpts, fleets.get(0)),
  };
}

type Runs = readonly { run: ConfigRun }[];

/** The oracle on each configuration's own order (oracle.ts); a configuration that recomputes
 * less than its bound fails the run. The figures are those of the lowest bound: its requests
 * with the oracle's cached tokens, each prefilled alone at the profile's time, nothing queued. */
async function oracleResult(
  o: SimRunOptions,
  f: FleetShape,
  runs: Runs,
  metricsOpts: { tp: number; ttftTargetMs: number },
  fleet: Pick<Lane, "prefillTimes">,
): Promise<SimConfigResult> {
  const capacity =
    o.workers * (Math.floor(f.deviceTokens / f.pageSize) + Math.floor(f.hostTokens / f.pageSize));
  let best: { run: ConfigRun; cached: Map<RequestRecord, number>; bound: number } | null = null;
  for (const { run } of runs) {
    const cached = oracleCached(run.records, f.pageSize, capacity, run.pageCount);
    let bound = 0;
    let got = 0;
    for (const [r, c] of cached) {
      bound += r.promptTokens - c;
      got += r.promptTokens - r.cached;
    }
    if (got < bound)
      throw new Error(
        `oracle: a configuration recomputed ${got} tokens, below the oracle's ${bound} on its own order: the oracle is wrong`,
      );
    if (!best || bound < best.bound) best = { run, cached, bound };
  }
  const b = best as NonNullable<typeof best>;
  const reqs = [...b.cached.keys()];
  const times = await fleet.prefillTimes(
    o.profile,
    reqs.map((r) => r.promptTokens - (b.cached.get(r) as number)),
    reqs.map((r) => b.cached.get(r) as number),
  );
  const records = reqs.map((r, i) => ({
    ...r,
    cached: b.cached.get(r) as number,
    firstToken: r.arrival + times[i],
    finish: r.arrival + times[i],
  }));
  const prefill = times.reduce((a, x) => a + x, 0);
  const run: ConfigRun = {
    ...b.run,
    records,
    workers: { oracle: { prefill_s: prefill, bytes: {} } },
  };
  return configResult(run, {}, metricsOpts);
}
