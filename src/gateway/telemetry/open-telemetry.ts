// What the gateway reports to, built in two steps: the log, metrics, clock and decision and
// request lines first (every part reports from its construction), the latency histograms and the
// span export last, once the parts are built (an export opened earlier would be left open by a
// configuration error found while building them).
import type { GatewayConfig } from "../config/schema.js";
import { type Clock, systemClock } from "../core/clock.js";
import { gatewayLogger } from "../core/logger.js";
import { LatencyRecorder } from "./latency.js";
import { GatewayMetrics } from "./metrics.js";
import type { Telemetry } from "./telemetry.js";
import { openTracer } from "./trace.js";

/** Telemetry but its latency histograms and spans. */
export type Reporting = Omit<Telemetry, "latency" | "tracer">;

export interface ReportingOptions {
  clock?: Clock;
  /** Operational log lines (default stderr). */
  log?: (line: string) => void;
  /** Where --json-log decision lines go (default stdout). */
  decisionLog?: (line: string) => void;
}

export function reporting(config: GatewayConfig, o: ReportingOptions): Reporting {
  const logger = gatewayLogger(config.logging, o.log);
  return {
    log: logger.log,
    metrics: new GatewayMetrics(),
    clock: o.clock ?? systemClock,
    decisionLog: config.jsonLog
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
export async function openTelemetry(config: GatewayConfig, r: Reporting): Promise<Telemetry> {
  const tracer = await openTracer(config.telemetry, r.log);
  const latencyOn = config.telemetry.latencyHistograms;
  return { ...r, latency: latencyOn ? new LatencyRecorder(r.metrics.ops) : null, tracer };
}
