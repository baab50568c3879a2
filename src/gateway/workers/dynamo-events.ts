// A gateway worker whose KV events come from NVIDIA Dynamo's event plane rather than SGLang's own
// stream (`dynamo:` in its worker config): Dynamo's ZMQ publisher for that worker, or Dynamo's NATS
// event plane read on the gateway's own NATS connection, the Dynamo worker id mapped to the kvctl
// worker id, through the Dynamo adapter into the gateway's index.
// Dynamo relays SGLang's own block hashes, so the worker's hash scheme is SGLang's chain at the
// block size configured (or the one its /server_info gives). Bad input (an unmapped Dynamo
// worker, an unknown block size, an undecodable message) is logged by name, counted in
// kvctl_gateway_dynamo_event_problems_total, and marks the worker stale (its overlap is not
// trusted); the stream goes on.
import { Counter, type Registry } from "prom-client";
import type { NatsConnection } from "@nats-io/transport-node";
import { DynamoEventAdapter, type DynamoProblem } from "../../events/dynamo/adapter.js";
import { DynamoNatsSubscriber } from "../../events/dynamo/nats.js";
import { DynamoEventSubscriber } from "../../events/dynamo/subscriber.js";
import type { EventSink } from "../../events/consumer.js";
import { indexSink, type KvIndex } from "../../index/index.js";
import type { WorkerDynamoConfig } from "../config/workers.js";
import type { GatewayLog } from "../core/logger.js";
import type { GatewayMetrics } from "../telemetry/metrics.js";

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

/** The index as the adapters' sink, each batch counted per worker as the SGLang streams' are. */
function countedSink(
  index: KvIndex,
  metrics: GatewayMetrics,
  log: (line: string) => void,
): EventSink {
  const sink = indexSink(index, log);
  return {
    ...sink,
    applyBatch: (worker, batch, seq) => {
      metrics.zmqEvents.inc({ worker });
      sink.applyBatch?.(worker, batch, seq);
    },
  };
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
export function subscribeDynamoEvents(o: DynamoEventsOptions): {
  adapter: DynamoEventAdapter;
  close(): Promise<void>;
} {
  const blockSize = o.config.blockSize ?? o.pageSize ?? undefined;
  const adapter = new DynamoEventAdapter({
    workers: { [o.config.workerId]: { worker: o.worker, ...(blockSize ? { blockSize } : {}) } },
    sink: countedSink(o.index, o.metrics, o.log),
  });
  const problems = problemCounter(o.metrics.registry);
  adapter.on("problem", (p: DynamoProblem) => {
    problems.inc({ worker: o.worker, kind: p.kind });
    o.log(
      `gateway: worker ${o.worker}: Dynamo KV events (${o.config.events}): ${p.kind}: ${p.message}`,
    );
  });
  // Any problem on this worker's stream leaves its index view untrusted: an unmapped id means the
  // mapping is wrong, a refused message may have carried this worker's blocks.
  adapter.on("stale", (s: { worker: string; reason: string }) =>
    o.stale(`${s.reason} (${s.worker})`),
  );
  const sub = new DynamoEventSubscriber(adapter, [o.config.events]).start();
  sub.on("error", (e: Error) =>
    o.log(`gateway: worker ${o.worker}: Dynamo KV-event subscriber: ${e.message}`),
  );
  return { adapter, close: () => sub.close() };
}

export interface DynamoNatsPlaneOptions {
  /** The gateway's NATS connection while it is up; null while it is down. */
  connection: () => NatsConnection | null;
  index: KvIndex;
  metrics: GatewayMetrics;
  log: GatewayLog;
}

interface PlaneMember {
  worker: string;
  stale: (why: string) => void;
}

/** Dynamo ids of other deployments' workers remembered for the once-per-id log line. */
const MAX_OTHERS_LOGGED = 1024;

/**
 * Dynamo's NATS event plane for every gateway worker configured with `dynamo.events: "nats"`.
 * Dynamo publishes all its workers' events on one subject family, so there is one subscription on
 * the gateway's NATS connection and one adapter mapping each member's Dynamo id to its kvctl id.
 * Events of Dynamo workers the gateway does not front are expected there: skipped, logged once
 * per id, and they make nothing stale. A message that does not decode may have carried any
 * member's blocks: every member goes stale.
 */
export class DynamoNatsPlane {
  private readonly adapter: DynamoEventAdapter;
  private readonly members = new Map<string, PlaneMember>();
  private readonly others = new Set<string>();
  private sub: DynamoNatsSubscriber | null = null;
  private subscribedTo: NatsConnection | null = null;

  constructor(private readonly o: DynamoNatsPlaneOptions) {
    this.adapter = new DynamoEventAdapter({
      unmapped: "ignore",
      sink: countedSink(o.index, o.metrics, o.log.warn),
    });
    const problems = problemCounter(o.metrics.registry);
    this.adapter.on("problem", (p: DynamoProblem) => {
      const to =
        p.worker === null
          ? [...this.members.values()]
          : [...this.members.values()].filter((m) => m.worker === p.worker);
      for (const m of to) {
        problems.inc({ worker: m.worker, kind: p.kind });
        o.log.warn(
          `gateway: worker ${m.worker}: Dynamo KV events (NATS plane): ${p.kind}: ${p.message}`,
        );
        m.stale(p.kind);
      }
    });
    this.adapter.on("ignored", (dynamoWorker: string) => {
      if (this.others.has(dynamoWorker) || this.others.size >= MAX_OTHERS_LOGGED) return;
      this.others.add(dynamoWorker);
      o.log.info(
        `gateway: Dynamo worker ${dynamoWorker} publishes on the NATS event plane but is none of this gateway's workers: its events are skipped`,
      );
    });
  }

  /** Maps one worker onto the plane (subscribing if NATS is up); close() unmaps it. */
  add(o: Omit<DynamoEventsOptions, "index" | "metrics" | "log">): { close(): Promise<void> } {
    const id = o.config.workerId;
    const blockSize = o.config.blockSize ?? o.pageSize ?? undefined;
    this.adapter.map(id, { worker: o.worker, ...(blockSize ? { blockSize } : {}) });
    const member: PlaneMember = { worker: o.worker, stale: o.stale };
    this.members.set(id, member);
    this.resubscribe();
    return {
      close: async () => {
        if (this.members.get(id) !== member) return;
        this.members.delete(id);
        this.adapter.unmap(id);
        if (this.members.size === 0) await this.unsubscribe();
      },
    };
  }

  /** Subscribes on the current connection when there is a member and it is not subscribed there yet
   * (called on every NATS (re)connect: a first connect that came late brings a new connection). */
  resubscribe(): void {
    const nc = this.o.connection();
    if (this.members.size === 0 || nc === null || nc === this.subscribedTo) return;
    void this.sub?.close();
    this.subscribedTo = nc;
    this.sub = new DynamoNatsSubscriber(this.adapter, nc).start();
  }

  private async unsubscribe(): Promise<void> {
    const sub = this.sub;
    this.sub = null;
    this.subscribedTo = null;
    await sub?.close();
  }
}
