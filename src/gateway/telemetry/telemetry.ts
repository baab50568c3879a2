// Where the gateway reports: its log, metrics, decision and request lines, latency histograms,
// spans, and the clock they are stamped with. One read-only value, built by createGateway; a
// helper that only reports takes this and nothing else.
import type { Clock } from "../core/clock.js";
import type { LatencyRecorder } from "./latency.js";
import type { GatewayLog, RequestLogLine } from "../core/logger.js";
import type { GatewayMetrics } from "./metrics.js";
import type { Tracer } from "./trace.js";

export interface Telemetry {
  readonly log: GatewayLog;
  readonly metrics: GatewayMetrics;
  readonly clock: Clock;
  /** Where --json-log decision lines go (contract/decision-log.ts), or null when the log is off. */
  readonly decisionLog: ((line: string) => void) | null;
  /** One line per finished request (logger.ts), or null when requests are not logged. */
  readonly requestLog: ((r: RequestLogLine) => void) | null;
  readonly nextRequestId: () => string;
  /** TTFT, inter-token and end-to-end histograms, or null when telemetry.latencyHistograms is off. */
  readonly latency: LatencyRecorder | null;
  /** Span export, or null when no telemetry.otlpTracesUrl is set. */
  readonly tracer: Tracer | null;
}
