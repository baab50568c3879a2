// The gateway's own objects kvctl sim's front is made of, imported in this one place: routing
// (the router, the index and Dynamo's scorer), admission (per request and per program), the agent
// policy and its program retention, the command sink, the ack observations, the Prefetch sender
// and SGLang session-radix closes. The sim never re-implements a rule of theirs; it feeds them
// observations and carries their commands on its virtual clock.
export { continuesToolLoop, admissionGate } from "../../gateway/admission-mode.js";
export type { Gate, GateTicket } from "../../gateway/admission.js";
export type { GateTimers } from "../../gateway/program-admission.js";
export { ackObservations } from "../../gateway/sessions/command-record.js";
export { CommandSink, type CommandOutcome } from "../../gateway/sessions/command-sink.js";
export { parseGatewayConfig } from "../../gateway/config/load.js";
export type { GatewayConfig } from "../../gateway/config/schema.js";
export { GatewayMetrics } from "../../gateway/telemetry/metrics.js";
export { heldPrefix, prefetchSender } from "../../gateway/prefetch-send.js";
export { RadixSessions, type RadixWorker } from "../../gateway/workers/radix-sessions.js";
export { routeRequest, type WorkerState } from "../../gateway/workers/router.js";
export { InFlightKv } from "../../gateway/workers/in-flight-kv.js";
export { createAgentPolicy, type AgentPolicy } from "../../policy/index.js";
export {
  InMemoryKvIndex,
  type OverlapResult,
  scoreWorkers,
  selectWorker,
  type WorkerLoad,
} from "../../index/index.js";
export type { GatewayPolicy, PolicyCommand } from "../../contract/policy.js";
export type { Observation, TurnRanges } from "../../contract/observations.js";
