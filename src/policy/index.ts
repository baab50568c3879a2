// Public API of the agent policies: the policy the gateway runs with `policy: agent`, its config
// schema, and the pure pieces a harness may want (marker parsing, hint parsing).
export { createAgentPolicy } from "./agent-policy.js";
export type { AgentPolicy, AgentPolicyOptions } from "./agent-policy.js";
export { defaultPoliciesConfig, policiesConfigSchema } from "./config.js";
export type { PoliciesConfig, PoliciesConfigInput } from "./config.js";
export { HINT_EVENTS, HINT_HEADER, HintError, parseHintBody, parseHintHeader } from "./hints.js";
export { MAX_BREAKPOINTS, parseCacheMarkers } from "./markers.js";
export type { MarkerSpec, ParsedMarkers } from "./markers.js";
