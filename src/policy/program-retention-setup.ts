// The agent policy's retention for program admission: one recorder per worker, sharing the gap
// distributions (a tool takes as long whichever worker its program runs on) and the metrics. The
// prices come from the policy's tool settings (prefill rate, device hold cost, keep TTLs), its
// idle lease and its retention settings (restore rate, host hold cost). The distributions are the
// policy's own (the tool rule decides from the same ones); each gap is learned once, by the tool
// rule when it is on (it sees every tool wait), else by the recorders.
import type { Registry } from "prom-client";
import type { PoliciesConfig } from "../contract/policies-config.js";
import type { ProgramRetention, SendPrefetch } from "../contract/policy.js";
import { DurationModel } from "./duration-model.js";
import { RetentionMetrics, RetentionRecorder } from "./program-retention.js";

export type RetentionFor = (
  worker: string,
  pageSize: () => number,
  prefetch?: SendPrefetch,
) => ProgramRetention;

export function retentionFor(
  p: PoliciesConfig,
  registry: Registry,
  decisionLog: ((line: string) => void) | null,
  onDecision?: (
    program: string,
    d: { action: "keep" | "park" | "let_go"; ttlSeconds: number },
  ) => void,
  shared?: DurationModel,
  /** A program's blocks on `worker` (its session's chain there), or null when it has none there. */
  blocksOf?: (program: string, worker: string) => readonly bigint[] | null,
  /** The clock decisions and gaps are timed on (ms; default Date.now). */
  now?: () => number,
): RetentionFor {
  const model = shared ?? new DurationModel(p.tools);
  const learnsGaps = !(shared && p.tools.enabled);
  let metrics: RetentionMetrics | null = null;
  const costs = {
    prefillTokensPerSecond: p.tools.prefillTokensPerSecond,
    restoreTokensPerSecond: p.retention.restoreTokensPerSecond,
    deviceHoldCostPerBlockSecond: p.tools.holdCostPerBlockSecond,
    hostHoldCostPerBlockSecond: p.retention.hostHoldCostPerBlockSecond,
    leaseSeconds: p.idle.leaseSeconds,
    taus: p.tools.tauCandidatesSeconds,
  };
  return (worker, pageSize, prefetch) => {
    metrics ??= new RetentionMetrics(registry);
    // A parked program's blocks come back before its next request is admitted (none known: it re-prefills).
    const restore =
      prefetch && blocksOf ? (id: string) => prefetch(blocksOf(id, worker) ?? []) : undefined;
    return new RetentionRecorder({
      worker,
      model,
      learnsGaps,
      costs,
      pageSize,
      metrics,
      decisionLog,
      onDecision,
      restore,
      now,
    });
  };
}
