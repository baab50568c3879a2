// One configuration's run, from a description that can cross a thread (ConfigTask): its workers'
// specs, its front (the gateway's objects, or Dynamo's router) built on its engine, and the run on
// one fleet process. run.ts runs these on lanes (lanes.ts), in its own thread or in one of its own.
import { configNamed, type SimConfigSpec } from "./configs.js";
import { type ConfigRun, SimEngine } from "./engine.js";
import type { FleetClient, WorkerSpec } from "./fleet-client.js";
import { DynamoFront } from "./front/dynamo-front.js";
import { GatewayFront } from "./front/gateway-front.js";
import type { CommandCounts, FrontHost, SimFront } from "./front/types.js";
import { PageIds } from "./page-ids.js";
import type { FleetShape, ProfileShape } from "./fleet-shape.js";
import type { SimProfileRef, SimWorkload } from "./types.js";
import { segmentsLength } from "./workload/index.js";

/** What a lane needs to run one configuration: plain data only. */
export interface ConfigTask {
  name: string;
  workload: SimWorkload;
  profile: string;
  workers: number;
  seed: number;
  perWorker: number;
  pinBudgetBlocks?: number;
  shape: ProfileShape;
  fleet: FleetShape;
  ref: SimProfileRef;
}

/** A configuration's run and the commands its front sent (`SimFront.commands`). */
export interface ConfigOutcome {
  run: ConfigRun;
  commands: Record<string, CommandCounts>;
}

export function workerSpecs(n: number, f: FleetShape, c: SimConfigSpec): WorkerSpec[] {
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

/** The configuration's front, built on its engine: the same admission budget for every one. */
function frontOf(
  t: ConfigTask,
  spec: SimConfigSpec,
  log?: (line: string) => void,
): (host: FrontHost) => SimFront {
  if (spec.front === "dynamo_kv") {
    const busyPrefillTokens = t.perWorker * medianPrompt(t.workload);
    return (host) => new DynamoFront({ host, busyPrefillTokens, seed: t.seed });
  }
  const policies = agentPolicies(t.shape, t.fleet, t.pinBudgetBlocks);
  return (host) =>
    new GatewayFront({
      host,
      config: spec,
      perWorker: t.perWorker,
      capacityTokens: t.fleet.deviceTokens + t.fleet.hostTokens,
      deviceTokens: t.fleet.deviceTokens,
      policies: spec.policy === "agent" ? policies : undefined,
      model: t.ref.model,
      seed: t.seed,
      log,
    });
}

/** Runs the task's configuration on `fleet`; its page ids are its own (the oracle reads one
 * configuration's pages at a time, and only which are the same). */
export async function runConfigTask(
  t: ConfigTask,
  fleet: FleetClient,
  progress?: (line: string) => void,
  log?: (line: string) => void,
): Promise<ConfigOutcome> {
  const spec = configNamed(t.name);
  const build = frontOf(t, spec, log);
  let front: SimFront | null = null;
  const engine = new SimEngine({
    workload: t.workload,
    pageIds: new PageIds(),
    profile: t.profile,
    workers: workerSpecs(t.workers, t.fleet, spec),
    fleet,
    front: (host) => {
      front = build(host);
      return front;
    },
    progress: (p) =>
      progress?.(
        `sim ${t.name}: ${p.finished}/${p.total} requests, ${p.simulatedS.toFixed(0)} s simulated`,
      ),
  });
  const run = await engine.run();
  return { run, commands: (front as unknown as SimFront).commands() };
}
