// Shutdown in order: readiness goes false and new requests get 503 with Retry-After (the listener's
// drain gate), the requests and streams under way get the grace period to finish, and only then is
// the server closed (what is still open after the grace is cut) and the commands and session
// records flushed (the gateway's close waits for both before it drops NATS).
import type { DrainGate } from "./listener.js";
import type { OpsMetrics } from "../telemetry/ops-metrics.js";
import type { GatewayLog } from "../core/logger.js";

export interface DrainParts {
  graceMs: number;
  metrics: OpsMetrics;
  log: GatewayLog;
  /** Closes the server and flushes (the gateway's close). */
  close: () => Promise<void>;
}

/** Drains and closes; `cut` is how many requests were still under way when the grace ran out. */
export async function drainThenClose(gate: DrainGate, p: DrainParts): Promise<{ cut: number }> {
  gate.draining = true;
  p.metrics.draining.set(1);
  p.log.info(
    `gateway: draining: not ready, new requests get 503; ${gate.active} request(s) under way get ${p.graceMs} ms to finish`,
  );
  const finished = await gate.idle(p.graceMs);
  const cut = finished ? 0 : gate.active;
  if (cut > 0)
    p.log.warn(`gateway: drain grace over with ${cut} request(s) still under way: cutting them`);
  await p.close();
  p.log.info("gateway: drained; commands and session records flushed");
  return { cut };
}
