// The worker plane: the workers and their membership (workers.ts), their KV events feeding the
// index (Dynamo's NATS event plane among them), their own account read with Inspect, and SGLang's
// session radix cache on the workers that run it. Its close runs after the session plane's: the
// Inspect rounds stop, then every worker's event stream and connection pool close.
import type { FastifyInstance } from "fastify";
import type { GatewayPolicy } from "../../contract/policy.js";
import type { KvIndex } from "../../index/index.js";
import type { GatewayLog } from "../core/logger.js";
import type { NatsLink } from "../nats-link.js";
import type { PlaneParts } from "../plane-parts.js";
import type { GatewayMetrics } from "../telemetry/metrics.js";
import { programRetention } from "../prefetch-send.js";
import { namedPins } from "../sessions/holds/holds.js";
import { DynamoNatsPlane } from "./dynamo-events.js";
import { RadixSessions } from "./radix-sessions.js";
import { WorkerInspector } from "./worker-inspect.js";
import { WorkerSet } from "./workers.js";

/** Its parts; the store holds the records whose holds each worker's Inspect is asked about. */
export interface WorkerPlaneParts extends PlaneParts {
  index: KvIndex;
  policy: GatewayPolicy;
}

export class WorkerPlane {
  readonly workers: WorkerSet;
  readonly inspector: WorkerInspector;
  /** SGLang's session radix cache: sessions closed where kvctl lets them go. */
  readonly radix: RadixSessions;

  constructor(private readonly p: WorkerPlaneParts) {
    const { config, index, nats, clock, metrics, log, observe } = p;
    this.radix = new RadixSessions({
      workers: () => this.workers.workers,
      registry: metrics.registry,
      log,
      timeoutMs: config.health.timeoutMs,
    });
    const publisher = () => (nats.connected ? nats.publisher : null);
    this.workers = new WorkerSet({
      config,
      index,
      metrics,
      now: () => clock.now(),
      observe,
      log,
      dynamoNats: dynamoNatsPlane(nats, index, metrics, log),
      retention: programRetention(p.policy, config, publisher, metrics, log, index),
      programReleased: (w, program, why) => this.radix.release(w, program, why),
      restarted: (w) => this.inspector.restartedFromEvents(w),
    });
    this.inspector = new WorkerInspector({
      workers: () => this.workers.workers,
      publisher,
      index,
      observe,
      now: () => clock.now(),
      log,
      metrics: p.holdMetrics,
      intervalMs: config.sessions.inspectMs,
      namedPins: (w) => namedPins(p.store.localRecords(), w),
    });
  }

  /** The process a worker runs now (from its last Inspect), null while unknown. */
  readonly incarnation = (worker: string): string | null => this.inspector.incarnation(worker);

  /** Probes every worker and subscribes to its events; then the health checks run. */
  start(): Promise<void> {
    return this.workers.start();
  }

  /** The Inspect rounds (they go over NATS: started once it is). */
  startInspect(): void {
    if (!this.p.nats.configured) return;
    this.inspector.start();
    if (this.p.config.sessions.inspectMs > 0) void this.inspector.inspectAll();
  }

  closeWith(app: FastifyInstance): void {
    app.addHook("onClose", async () => {
      await this.inspector.stop().catch(() => undefined);
      await this.workers.close().catch(() => undefined);
    });
  }
}

/** Dynamo's NATS event plane on the gateway's connection, when NATS is configured. */
function dynamoNatsPlane(
  nats: NatsLink,
  index: KvIndex,
  metrics: GatewayMetrics,
  log: GatewayLog,
): DynamoNatsPlane | null {
  if (!nats.configured) return null;
  const plane = new DynamoNatsPlane({
    connection: () => (nats.connected ? nats.nc : null),
    index,
    metrics,
    log,
  });
  nats.whenUp(() => plane.resubscribe());
  return plane;
}
