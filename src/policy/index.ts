// Public API of the agent policies: the policy the gateway runs with `policy: agent` (agentPolicy,
// the factory createGateway takes; createAgentPolicy for a policy on its own) and its config
// schema. The hint and marker parsers live with the gateway's request side (kvctl/gateway) and
// are re-exported here, from the gateway's public face, for callers that found them here first.
export { agentPolicy, createAgentPolicy } from "./agent-policy.js";
export type { AgentPolicy, AgentPolicyOptions } from "./agent-policy.js";
export { defaultPoliciesConfig, policiesConfigSchema } from "../contract/policies-config.js";
export type { PoliciesConfig, PoliciesConfigInput } from "../contract/policies-config.js";
export {
  HINT_EVENTS,
  HINT_HEADER,
  HintError,
  MAX_BREAKPOINTS,
  parseCacheMarkers,
  parseHintBody,
  parseHintHeader,
} from "../gateway/index.js";
export type { MarkerSpec, ParsedMarkers } from "../gateway/index.js";
