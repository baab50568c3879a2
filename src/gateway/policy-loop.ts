// The policy's loop: each observation goes to the policy, and the commands it returns along the
// command path (named, capped, each hold named in its record, sent); their outcomes come back as
// observations. The loop is the one edge that runs against the gateway's build order (the
// command path and the workers report into the policy that feeds them), so it is one named
// object, the inlet, connected once the parts it feeds exist.
import type { Observation } from "../contract/observations.js";
import type { GatewayPolicy, PolicyCommand, TenantPinCaps } from "../contract/policy.js";
import type { ResolvedAuth } from "./auth/table.js";
import type { GatewayLog } from "./core/logger.js";
import type { CommandPath } from "./sessions/holds/command-path.js";
import { currentStored } from "./sessions/holds/holds.js";

/** Where observations enter the loop: handed to the parts first, connected to the policy after. */
export class PolicyInlet {
  private target: ((o: Observation) => void) | null = null;

  readonly observe = (o: Observation): void => {
    if (!this.target)
      throw new Error("gateway: an observation reached the policy before it was connected");
    this.target(o);
  };

  connect(target: (o: Observation) => void): void {
    this.target = target;
  }
}

/**
 * Each observation to the policy, its commands along the command path. `first` hears each
 * observation before the policy does (the workers' radix sessions); `incarnation` is the process
 * each worker runs now, so holds on an earlier one are not the session's any more.
 */
export function policyObserver(
  policy: GatewayPolicy,
  path: CommandPath,
  incarnation: (worker: string) => string | null,
  log: GatewayLog,
  first: (o: Observation) => void,
): (o: Observation) => void {
  return (o) => {
    first(o);
    // Holds on a worker's earlier process are not the session's any more (the policy re-issues them).
    if (o.type === "TurnStarted" && o.stored) {
      o.stored = {
        ...o.stored,
        pins: currentStored(o.stored.pins, incarnation),
        leases: currentStored(o.stored.leases, incarnation),
      };
    }
    path.observed(o);
    let out: readonly PolicyCommand[];
    try {
      out = policy.observe(o);
    } catch (e) {
      log.error(
        `gateway: policy ${policy.name} threw on ${o.type}: ${(e as Error).message} (ignored)`,
      );
      return;
    }
    path.submit(out);
    // Close releases every hold the record names, whichever replica took it (after the policy's own).
    if (o.type === "SessionHint" && o.event === "close") void path.ledger.close(o.sessionId);
  };
}

/** Each tenant's pin caps from the auth config, for the policy to apply before it pins. */
export function tenantCapsOf(auth: ResolvedAuth | null): (tenant: string) => TenantPinCaps | null {
  return (id) => {
    const t = auth?.tenants.get(id);
    return t && (t.maxPinnedBlocks !== undefined || t.maxPinnedBlocksPerSession !== undefined)
      ? { perSession: t.maxPinnedBlocksPerSession ?? null, perTenant: t.maxPinnedBlocks ?? null }
      : null;
  };
}
