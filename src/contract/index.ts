// The contract between the gateway and its policies, the one module both sides import: the typed
// observations, the policy interface and its commands, and the policies' settings (a key of the
// gateway config file).
export type * from "./observations.js";
export type { GatewayPolicy, PolicyCommand, PolicyEnv, PolicyFactory } from "./policy.js";
export { defaultPoliciesConfig, policiesConfigSchema } from "./policies-config.js";
export type { PoliciesConfig, PoliciesConfigInput } from "./policies-config.js";
