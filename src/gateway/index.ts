// Public API of the gateway: createGateway() and what its options and observations are made of.
export { createGateway } from "./gateway.js";
export type { Gateway, GatewayOptions } from "./gateway.js";
export {
  GatewayConfigError,
  parseGatewayConfig,
  parseWorkerFlag,
  readConfigFile,
} from "./config/load.js";
export { gatewayConfigSchema } from "./config/schema.js";
export type { GatewayConfig, GatewayConfigInput } from "./config/schema.js";
export type { NatsConfig } from "./config/nats.js";
export type { RoutingConfig } from "./config/routing.js";
export type { WorkerConfig } from "./config/workers.js";
export { loggingPolicy, noopPolicy } from "./policy.js";
export { applyWorkerList, watchWorkerList } from "./workers/config-watch.js";
export { exposureCost, exposureGaps, isLoopback } from "./http/listen-exposure.js";
export type { GatewayLog, LogFields } from "./core/logger.js";
export type { GatewayPolicy, PolicyCommand, PolicyEnv, PolicyFactory } from "../contract/policy.js";
export type * from "../contract/observations.js";
export type {
  CommandRecord,
  LeaseRecord,
  PinRecord,
  SessionRecord,
  TurnSummary,
} from "./sessions/holds/record.js";
export { SESSION_HEADERS, sessionIdOf } from "./request/session-id.js";
export { routeRequest } from "./workers/router.js";
export type {
  RouteDecision,
  RouteReason,
  RouteRequest,
  RoutingOptions,
  WorkerState,
} from "./workers/router.js";
export { schemeFromServerInfo, WorkerSchemeError } from "./workers/worker-scheme.js";
export type { HashScheme } from "./workers/worker-scheme.js";
export type { Clock } from "./core/clock.js";
// The client-request parsers (hint header and body, prompt-cache markers).
export {
  HINT_EVENTS,
  HINT_HEADER,
  HintError,
  parseHintBody,
  parseHintHeader,
} from "./request/hints.js";
export { MAX_BREAKPOINTS, parseCacheMarkers } from "./request/markers.js";
export type { ParsedMarkers } from "./request/markers.js";
export type { MarkerSpec } from "./request/shapes.js";
