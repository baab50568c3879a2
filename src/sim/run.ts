// runSim: one workload through every configuration (and the oracle) on the same fleet shape,
// the figures of each (SimRunResult). Configurations run `parallel` at a time, each on one of as
// many fleet processes; each is deterministic in the seed, so the result does not depend on how
// many ran at once or which process ran it.
import { FleetClient, FleetError, type WorkerSpec } from "./fleet-client.js";
import { CONFIG_NAMES, configNamed, type SimConfigSpec } from "./configs.js";
import { type ConfigRun, type RequestRecord, SimEngine } from "./engine.js";
import { DynamoFront } from "./front/dynamo-front.js";
import { GatewayFront } from "./front/gateway-front.js";
import type { FrontHost, SimFront } from "./front/types.js";
import { configResult } from "./metrics.js";
import { oracleCached } from "./oracle.js";
import { PageIds } from "./page-ids.js";
import type { SimConfigResult, SimProfileRef, SimRunResult, SimWorkload } from "./types.js";
import { segmentsLength } from "./workload/index.js";

/** The profile's SGLang settings (python/kvctl_sim/__main__.py `_shape`). */
export interface ProfileShape {
  page_size: number;
  device_kv_tokens: number;
  host_kv_tokens: number;
  max_prefill_tokens: number;
  chunked_prefill_size: number;
  max_running_requests: number;
  layers: number;
  kv_bytes_per_token: number;
  prefill_tokens_per_s: number;
  h2d_tokens_per_s: number;
}

/** HiCache's L3 on every worker: none, a store of its own, or one store the fleet shares. */
export const STORAGE_MODES = ["none", "worker", "shared"] as const;
export type StorageMode = (typeof STORAGE_MODES)[number];

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
  fleet: FleetClient,
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

/** The run's fleet processes, started when first needed; each runs one configuration at a time
 * (`init` builds its workers afresh, clock at 0), so a run starts `parallel` of them, not one per
 * configuration, and runs one after another (the regime map's) can share them. */
export class FleetProcesses {
  private readonly clients: (FleetClient | undefined)[] = [];

  constructor(private readonly o: { tree: string; log?: (line: string) => void }) {}

  get(i: number): FleetClient {
    this.clients[i] ??= new FleetClient({ tree: this.o.tree, log: this.o.log });
    return this.clients[i];
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c?.close()));
  }
}

export interface FleetShape {
  pageSize: number;
  deviceTokens: number;
  hostTokens: number;
  chunkedPrefillSize: number;
  storage: StorageMode;
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

function workerSpecs(n: number, f: FleetShape, c: SimConfigSpec): WorkerSpec[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `w${i}`,
    page_size: f.pageSize,
    device_tokens: f.deviceTokens,
    host_tokens: f.hostTokens,
    chunked_prefill_size: f.chunkedPrefillSize,
    session_radix: c.sessionRadix,
    eviction: c.sessionRadix ? "priority" : "lru",
    kvctl: c.kvctl,
    storage: f.storage,
    // Round robin reads no index: its workers publish no KV events (SGLang hashes every page it
    // publishes, the fleet's largest cost); nothing else in the cache reads those hashes here.
    events: c.front !== "round_robin",
  }));
}

/** The agent policy's settings for this fleet (as bench:agent sets them for its workers). */
export function agentPolicies(
  shape: ProfileShape,
  f: FleetShape,
  pinBudgetBlocks?: number,
): Record<string, unknown> {
  return {
    pins: {
      budgetBlocks: pinBudgetBlocks ?? Math.max(1, Math.floor((0.5 * f.hostTokens) / f.pageSize)),
    },
    tools: { prefillTokensPerSecond: shape.prefill_tokens_per_s },
    retention: { restoreTokensPerSecond: shape.h2d_tokens_per_s },
    idle: { deviceBlocks: Math.floor(f.deviceTokens / f.pageSize) },
  };
}

/** The workload's median prompt (tokens): Dynamo's queue threshold is the budget's requests of it. */
function medianPrompt(w: SimWorkload): number {
  const lens: number[] = [];
  for (const p of w.programs) for (const r of p.requests) lens.push(segmentsLength(r.prompt));
  lens.sort((a, b) => a - b);
  return lens.length ? lens[(lens.length - 1) >> 1] : 0;
}

interface ConfigJob {
  spec: SimConfigSpec;
  front: (host: FrontHost) => SimFront;
}

async function runConfig(
  o: SimRunOptions,
  job: ConfigJob,
  specs: WorkerSpec[],
  pageIds: PageIds,
  fleet: FleetClient,
): Promise<{ run: ConfigRun; front: SimFront }> {
  let front: SimFront | null = null;
  const engine = new SimEngine({
    workload: o.workload,
    pageIds,
    profile: o.profile,
    workers: specs,
    fleet,
    front: (host) => {
      front = job.front(host);
      return front;
    },
    progress: (p) =>
      o.progress?.(
        `sim ${job.spec.name}: ${p.finished}/${p.total} requests, ${p.simulatedS.toFixed(0)} s simulated`,
      ),
  });
  const run = await engine.run();
  return { run, front: front as unknown as SimFront };
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
  jobs: readonly ConfigJob[],
  n: number,
  f: (job: ConfigJob, lane: number) => Promise<R>,
): Promise<R[]> {
  const order = jobs.map((_, i) => i);
  order.sort((a, b) => Number(jobs[b].spec.kvctl) - Number(jobs[a].spec.kvctl));
  const ran = await pool(order, n, (i, lane) => f(jobs[i], lane));
  const out: R[] = new Array(jobs.length);
  order.forEach((i, k) => {
    out[i] = ran[k];
  });
  return out;
}

export async function runSim(o: SimRunOptions): Promise<SimRunResult> {
  if (o.fleets) return await runOn(o, o.fleets);
  const fleets = new FleetProcesses(o);
  try {
    return await runOn(o, fleets);
  } finally {
    await fleets.close();
  }
}

/** Each configuration's front, built on its engine: the same admission budget for all. */
function configJobs(
  o: SimRunOptions,
  shape: ProfileShape,
  f: FleetShape,
  ref: SimProfileRef,
): ConfigJob[] {
  const perWorker = o.perWorker ?? 32;
  const busyPrefill = perWorker * medianPrompt(o.workload);
  const policies = agentPolicies(shape, f, o.pinBudgetBlocks);
  return (o.configs ?? CONFIG_NAMES).map((name) => {
    const spec = inputCheck(() => configNamed(name));
    if (spec.front === "dynamo_kv")
      return {
        spec,
        front: (host) => new DynamoFront({ host, busyPrefillTokens: busyPrefill, seed: o.seed }),
      };
    return {
      spec,
      front: (host) =>
        new GatewayFront({
          host,
          config: spec,
          perWorker,
          capacityTokens: f.deviceTokens + f.hostTokens,
          deviceTokens: f.deviceTokens,
          policies: spec.policy === "agent" ? policies : undefined,
          model: ref.model,
          seed: o.seed,
          log: o.log,
        }),
    };
  });
}

async function runOn(o: SimRunOptions, fleets: FleetProcesses): Promise<SimRunResult> {
  const t0 = performance.now();
  const { ref, shape } = await readProfile(o.profile, fleets.get(0));
  const f = fleetShape(shape, o.pool, o.storage);
  checkFits(o.workload, f);
  const jobs = configJobs(o, shape, f, ref);
  const metricsOpts = { tp: ref.tp, ttftTargetMs: o.ttftTargetMs ?? 2000 };
  const pageIds = new PageIds();
  const runs = await costliestFirst(jobs, o.parallel ?? 2, (job, lane) =>
    runConfig(o, job, workerSpecs(o.workers, f, job.spec), pageIds, fleets.get(lane)),
  );
  const configs: Record<string, SimConfigResult> = {};
  let simulated = 0;
  runs.forEach(({ run, front }, i) => {
    o.log?.(
      `sim ${jobs[i].spec.name}: ${run.advances} round trips (its fleet process: ${run.fleetCpuS.toFixed(1)} CPU s so far)`,
    );
    configs[jobs[i].spec.name] = configResult(run, front.commands(), metricsOpts);
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
    oracle: await oracleResult(o, f, runs, pageIds, metricsOpts, fleets.get(0)),
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
  pageIds: PageIds,
  metricsOpts: { tp: number; ttftTargetMs: number },
  fleet: FleetClient,
): Promise<SimConfigResult> {
  const capacity =
    o.workers * (Math.floor(f.deviceTokens / f.pageSize) + Math.floor(f.hostTokens / f.pageSize));
  let best: { run: ConfigRun; cached: Map<RequestRecord, number>; bound: number } | null = null;
  for (const { run } of runs) {
    const cached = oracleCached(run.records, f.pageSize, capacity, pageIds.size);
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
