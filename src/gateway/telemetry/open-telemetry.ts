// What the gateway reports to, built in two steps: the log, metrics, clock and decision and
// request lines first (every part reports from its construction), the latency histograms and the
// span export last, once the parts are built (an export opened earlier would be left open by a
// configuration error found while building them).
import type { LoggingConfig, TelemetryConfig } from "../config/ops.js";
import { type Clock, systemClock } from "../core/clock.js";
import { gatewayLogger } from "../core/logger.js";
import { LatencyRecorder } from "./latency.js";
import { GatewayMetrics } from "./metrics.js";
import type { Telemetry } from "./telemetry.js";
import { openTracer } from "./trace.js";

/** Telemetry but its latency histograms and spans. */
export type Reporting = Omit<Telemetry, "latency" | "tracer">;

export interface ReportingOptions {
  /** One JSON line per routing decision (the config's jsonLog). */
  jsonLog: boolean;
  clock?: Clock;
  /** Operational log lines (default stderr). */
  log?: (line: string) => void;
  /** Where --json-log decision lines go (default stdout). */
  decisionLog?: (line: string) => void;
}

export function reporting(logging: LoggingConfig, o: ReportingOptions): Reporting {
  const logger = gatewayLogger(logging, o.log);
  return {
    log: logger.log,
    metrics: new GatewayMetrics(),
    clock: o.clock ?? systemClock,
    decisionLog: o.jsonLog
      ? (o.decisionLog ?? ((l: string) => process.stdout.write(`${l}\n`)))
      : null,
    requestLog: logger.request,
    nextRequestId: requestIds(),
  };
}

/** Request ids: this process's id and a count, base 36. */
function requestIds(): () => string {
  let seq = 0;
  return () => `gw-${process.pid.toString(36)}-${(++seq).toString(36)}`;
}

/** The whole Telemetry: latency histograms when configured, the span export when one is set. */
export async function openTelemetry(t: TelemetryConfig, r: Reporting): Promise<Telemetry> {
  const tracer = await openTracer(t, r.log);
  const latencyOn = t.latencyHistograms;
  return { ...r, latency: latencyOn ? new LatencyRecorder(r.metrics.ops) : null, tracer };
}
