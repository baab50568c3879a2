// The two policies that ship with the gateway (the interface is the contract's, src/contract/),
// and how the gateway settles on its policy: the one it was handed (an object or a factory), or
// the config's `policy: noop|log`. `policy: agent` names the agent policies of kvctl/policy,
// which the caller wires (the kvctl gateway command does; a library caller passes
// `policy: agentPolicy` from kvctl/policy), so the gateway never imports them.
import type { GatewayPolicy, PolicyEnv, PolicyFactory } from "../contract/policy.js";
import type { GatewayConfig } from "./config/schema.js";
import { GatewayConfigError } from "./config/load.js";

/** Sends nothing. */
export const noopPolicy: GatewayPolicy = {
  name: "noop",
  observe: () => [],
};

/** Sends nothing; writes one JSON line per observation (bigints as decimal strings). */
export function loggingPolicy(
  write: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): GatewayPolicy {
  return {
    name: "log",
    observe(o) {
      write(
        JSON.stringify({ policy: "log", ...o }, (_k, v) =>
          typeof v === "bigint" ? v.toString() : v,
        ),
      );
      return [];
    },
  };
}

/**
 * The policy the gateway runs: the one handed in, else the one config.policy names. env.log takes
 * what a policy reports as wrong; `log` writes its observation lines to `observations`.
 */
export function resolvePolicy(
  given: GatewayPolicy | PolicyFactory | undefined,
  config: GatewayConfig,
  env: PolicyEnv,
  observations: (line: string) => void = env.log,
): GatewayPolicy {
  if (typeof given === "function") return given(env);
  if (given) return given;
  if (config.policy === "log") return loggingPolicy(observations);
  if (config.policy === "agent") {
    throw new GatewayConfigError(
      "policy: 'agent' is wired by the caller: pass `policy: agentPolicy` (kvctl/policy) to createGateway, or use the kvctl gateway command",
    );
  }
  return noopPolicy;
}
