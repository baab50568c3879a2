// A gateway worker whose KV events come from NVIDIA Dynamo's event plane rather than SGLang's own
// stream (`dynamo:` in its worker config): Dynamo's ZMQ publisher for that worker, the Dynamo
// worker id mapped to the kvctl worker id, through the Dynamo adapter into the gateway's index.
// Dynamo relays SGLang's own block hashes, so the worker's hash scheme is SGLang's chain at the
// block size configured (or the one its /server_info gives). Bad input (an unmapped Dynamo
// worker, an unknown block size, an undecodable message) is logged by name, counted in
// kvctl_gateway_dynamo_event_problems_total, and marks the worker stale (its overlap is not
// trusted); the stream goes on.
import { Counter, type Registry } from "prom-client";
import { DynamoEventAdapter, type DynamoProblem } from "../events/dynamo/adapter.js";
import { DynamoEventSubscriber } from "../events/dynamo/subscriber.js";
import { indexSink, type KvIndex } from "../index/index.js";
import type { WorkerDynamoConfig } from "./config.js";
import type { GatewayMetrics } from "./metrics.js";

const problemCounters = new WeakMap<Registry, Counter<"worker" | "kind">>();

function problemCounter(registry: Registry): Counter<"worker" | "kind"> {
  let c = problemCounters.get(registry);
  if (!c) {
    c = new Counter({
      name: "kvctl_gateway_dynamo_event_problems_total",
      help: "Dynamo KV-event messages refused, by kind (unmapped_worker, unknown_block_size, tokens_hash, decode); each marks the worker stale",
      labelNames: ["worker", "kind"] as const,
      registers: [registry],
    });
    problemCounters.set(registry, c);
  }
  return c;
}

export interface DynamoEventsOptions {
  /** kvctl worker id. */
  worker: string;
  config: WorkerDynamoConfig;
  /** Block size when the config gives none (the worker's page size), if known. */
  pageSize: number | null;
  index: KvIndex;
  metrics: GatewayMetrics;
  log: (line: string) => void;
  stale: (why: string) => void;
}

/** Subscribes to one worker's Dynamo event plane; close() stops it. */
export function subscribeDynamoEvents(o: DynamoEventsOptions): { adapter: DynamoEventAdapter; close(): Promise<void> } {
  const blockSize = o.config.blockSize ?? o.pageSize ?? undefined;
  const sink = indexSink(o.index, o.log);
  const adapter = new DynamoEventAdapter({
    workers: { [o.config.workerId]: { worker: o.worker, ...(blockSize ? { blockSize } : {}) } },
    sink: {
      ...sink,
      applyBatch: (worker, batch, seq) => {
        o.metrics.zmqEvents.inc({ worker });
        sink.applyBatch?.(worker, batch, seq);
      },
    },
  });
  const problems = problemCounter(o.metrics.registry);
  adapter.on("problem", (p: DynamoProblem) => {
    problems.inc({ worker: o.worker, kind: p.kind });
    o.log(`gateway: worker ${o.worker}: Dynamo KV events (${o.config.events}): ${p.kind}: ${p.message}`);
  });
  // Any problem on this worker's stream leaves its index view untrusted: an unmapped id means the
  // mapping is wrong, a refused message may have carried this worker's blocks.
  adapter.on("stale", (s: { worker: string; reason: string }) => o.stale(`${s.reason} (${s.worker})`));
  const sub = new DynamoEventSubscriber(adapter, [o.config.events]).start();
  sub.on("error", (e: Error) => o.log(`gateway: worker ${o.worker}: Dynamo KV-event subscriber: ${e.message}`));
  return { adapter, close: () => sub.close() };
}
