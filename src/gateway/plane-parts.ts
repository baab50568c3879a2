// What every plane is built with (createGateway builds it once): the configuration, the NATS
// link, the session records, the clock, the metrics and the log, and the policy's inlet. A plane's
// own parts extend it.
import type { Observation } from "../contract/observations.js";
import type { GatewayConfig } from "./config/schema.js";
import type { Clock } from "./core/clock.js";
import type { GatewayLog } from "./core/logger.js";
import type { NatsLink } from "./nats-link.js";
import type { HoldMetrics } from "./sessions/holds/metrics.js";
import type { SessionStore } from "./sessions/session-store.js";
import type { GatewayMetrics } from "./telemetry/metrics.js";

export interface PlaneParts {
  config: GatewayConfig;
  nats: NatsLink;
  store: SessionStore;
  clock: Clock;
  metrics: GatewayMetrics;
  holdMetrics: HoldMetrics;
  log: GatewayLog;
  /** The policy's inlet: what a plane sees goes to it. */
  observe: (o: Observation) => void;
}
