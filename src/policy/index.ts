// Public API of the agent policies: the policy the gateway runs with `policy: agent` (agentPolicy,
// the factory createGateway takes; createAgentPolicy for a policy on its own) and its config
// schema. The hint and marker parsers are the gateway's request side: kvctl/gateway exports them.
export { agentPolicy, createAgentPolicy } from "./agent-policy.js";
export type { AgentPolicy, AgentPolicyOptions } from "./agent-policy.js";
export { defaultPoliciesConfig, policiesConfigSchema } from "../contract/policies-config.js";
export type { PoliciesConfig, PoliciesConfigInput } from "../contract/policies-config.js";
