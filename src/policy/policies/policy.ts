// One agent rule: decides on an observation in a transaction (tx.ts): it reads the policy's state
// as the transaction shows it and records its commands and changes there; the policy applies them.
import type { Observation } from "../../contract/observations.js";
import type { PolicyTx, PolicyView } from "../tx.js";

export interface AgentRule<S = unknown> {
  readonly name: string;
  /** What it remembers before the first observation (kept by the policy, replaced through tx.setOwn). */
  readonly init?: () => S;
  decide(o: Observation, tx: PolicyTx<S>): void;
}

export function pageSizeOf(v: Pick<PolicyView, "pageSizes">, worker: string): number {
  return v.pageSizes.get(worker) ?? 1;
}
