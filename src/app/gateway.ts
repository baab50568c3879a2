// The gateway as the kvctl command runs it: createGateway with the policy config.policy names,
// the agent policies of src/policy included. The one place that wires the two areas together
// (gateway/ and policy/ import only the contract, src/contract/, from each other).
import {
  createGateway as createBareGateway,
  type Gateway,
  type GatewayOptions,
} from "../gateway/index.js";
import { agentPolicy } from "../policy/agent-policy.js";

export type { Gateway, GatewayOptions } from "../gateway/index.js";

/** createGateway, with `policy: agent` in the config wired to the agent policies. */
export function createGateway(options: GatewayOptions): Promise<Gateway> {
  const named = (options.config as { policy?: unknown } | undefined)?.policy;
  return createBareGateway(
    options.policy || named !== "agent" ? options : { ...options, policy: agentPolicy },
  );
}
