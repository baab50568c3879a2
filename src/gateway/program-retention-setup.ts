// Which workers' program admission decides retention, and with what: on in program mode under the
// agent policy unless `admission.retention` says otherwise. The gap distributions are shared by
// every worker (a tool takes as long whichever worker its program runs on); the prices come from
// the agent policy's tool settings (prefill rate, device hold cost, keep TTLs) and idle lease.
import type { Registry } from "prom-client";
import { policiesConfigSchema } from "../contract/policies-config.js";
import { DurationModel } from "../policy/duration-model.js";
import type { GatewayConfig } from "./config.js";
import type { ProgramRetention } from "./program-admission.js";
import { RetentionMetrics, RetentionRecorder } from "./program-retention.js";

export type RetentionFor = (worker: string, pageSize: () => number) => ProgramRetention;

export function retentionFor(config: GatewayConfig, registry: Registry, decisionLog: ((line: string) => void) | null): RetentionFor | null {
  const a = config.admission;
  if (a.mode !== "program" || !(a.retention ?? config.policy === "agent")) return null;
  const p = policiesConfigSchema.parse(config.policies ?? {});
  const model = new DurationModel(p.tools);
  const metrics = new RetentionMetrics(registry);
  const costs = {
    prefillTokensPerSecond: p.tools.prefillTokensPerSecond,
    restoreTokensPerSecond: a.restoreTokensPerSecond,
    deviceHoldCostPerBlockSecond: p.tools.holdCostPerBlockSecond,
    hostHoldCostPerBlockSecond: a.hostHoldCostPerBlockSecond,
    leaseSeconds: p.idle.leaseSeconds,
    taus: p.tools.tauCandidatesSeconds,
  };
  return (worker, pageSize) => new RetentionRecorder({ worker, model, costs, pageSize, metrics, decisionLog });
}
