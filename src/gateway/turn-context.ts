// What every part of serving a turn shares: configuration, workers, index, sessions, metrics,
// clock and the observation sink.
import type { Observation } from "../contract/observations.js";
import type { KvIndex } from "../index/index.js";
import type { AuthGate } from "./auth/gate.js";
import type { GatewayConfig } from "./config/schema.js";
import type { GatewayMetrics } from "./metrics.js";
import type { Clock } from "./core/clock.js";
import type { SessionStore } from "./session-store.js";
import type { WorkerSet } from "./workers.js";
import type { LatencyRecorder } from "./latency.js";
import type { Tracer } from "./trace.js";
import type { GatewayLog, RequestLogLine } from "./logger.js";

export interface TurnContext {
  config: GatewayConfig;
  workers: WorkerSet;
  index: KvIndex;
  sessions: SessionStore;
  metrics: GatewayMetrics;
  clock: Clock;
  observe: (o: Observation) => void;
  /** Where --json-log decision lines go (contract/decision-log.ts), or null when the log is off. */
  decisionLog: ((line: string) => void) | null;
  log: GatewayLog;
  rand: () => number;
  nextRequestId: () => string;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  recording: Map<string, Promise<void>>;
  /** TTFT, inter-token and end-to-end histograms, or null when telemetry.latencyHistograms is off. */
  latency?: LatencyRecorder | null;
  /** Span export, or null when no telemetry.otlpTracesUrl is set. */
  tracer?: Tracer | null;
  /** One line per finished request (logger.ts), or null when requests are not logged. */
  requestLog?: ((r: RequestLogLine) => void) | null;
  /** Client keys, tenants and the admin key; null when auth is not configured. */
  auth?: AuthGate | null;
}
