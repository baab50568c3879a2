// One agent policy: reads an observation and the shared context, emits commands through it.
import type { Observation } from "../../contract/observations.js";
import type { PolicyContext } from "../context.js";

export interface AgentRule {
  readonly name: string;
  observe(o: Observation, ctx: PolicyContext): void;
}

export function pageSizeOf(ctx: PolicyContext, worker: string): number {
  return ctx.pageSizes.get(worker) ?? 1;
}
