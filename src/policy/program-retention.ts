// The retention side of program admission for one worker: each tool boundary's decision
// (src/policy/retention.ts, from the gaps this worker's programs showed per tool), and what became
// of it: the actual gap beside the predicted one, and the outcome, hit (the program came back
// while what was kept for it was still held), wasted (the hold ran out first, or pressure took it)
// or recomputed (let go, and it came back). A parked program's blocks are brought back through
// `restore` (the worker's restore path) before its next request is admitted.
import { Counter, Histogram, type Registry } from "prom-client";
import { decisionLine } from "../contract/decision-log.js";
import type { PrefetchOutcome, ProgramRetention } from "../contract/policy.js";
import type { DurationModel } from "./duration-model.js";
import { decideRetention, type RetentionAction, type RetentionCosts } from "./retention.js";

export type RetentionOutcome = "hit" | "wasted" | "recomputed";

/** One set of metrics for every worker's retention (one registry holds each name once). */
export class RetentionMetrics {
  readonly decisions: Counter<"worker" | "action">;
  readonly outcomes: Counter<"worker" | "action" | "outcome">;
  readonly gaps: Histogram<"kind">;
  readonly prefetches: Counter<"worker" | "outcome">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.decisions = new Counter({
      name: "kvctl_program_retention_decisions_total",
      help: "Tool-boundary decisions of program admission, by worker and action (keep, park, let_go)",
      labelNames: ["worker", "action"],
      registers,
    });
    this.outcomes = new Counter({
      name: "kvctl_program_retention_outcomes_total",
      help: "What became of each decision: hit (came back while held), wasted (the hold ran out first or pressure took it), recomputed (let go and came back)",
      labelNames: ["worker", "action", "outcome"],
      registers,
    });
    this.gaps = new Histogram({
      name: "kvctl_program_gap_seconds",
      help: "Tool gaps of admitted programs: predicted at the decision and actual at the return",
      labelNames: ["kind"],
      buckets: [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600],
      registers,
    });
    this.prefetches = new Counter({
      name: "kvctl_program_prefetch_total",
      help: "Restores before a parked program's admission, by how they ended (timeout: admitted at the deadline)",
      labelNames: ["worker", "outcome"],
      registers,
    });
  }
}

interface Open {
  action: RetentionAction;
  tools: readonly (string | null)[];
  predicted: number;
  at: number;
  /** Its outcome was counted already (the hold lapsed); the return still measures the gap. */
  settled: boolean;
}

export interface RetentionRecorderOptions {
  worker: string;
  model: DurationModel;
  /** Whether the actual gaps go into `model` (false: another reader of the same model learns them). */
  learnsGaps?: boolean;
  costs: Omit<RetentionCosts, "tokens" | "pageSize">;
  /** The worker's page size (known once it answered). */
  pageSize: () => number;
  metrics: RetentionMetrics;
  decisionLog?: ((line: string) => void) | null;
  /** The worker's restore of a parked program's blocks (absent: parked programs re-prefill what they lost). */
  restore?: (program: string) => Promise<PrefetchOutcome>;
  now?: () => number;
  /** Each decision, as it is made (the policy's tool rule follows it for the KV). */
  onDecision?: (program: string, d: { action: RetentionAction; ttlSeconds: number }) => void;
  /** Open gaps remembered at most (the oldest go first). */
  maxOpen?: number;
}

export class RetentionRecorder implements ProgramRetention {
  private readonly open = new Map<string, Open>();
  readonly prefetch?: (id: string) => Promise<PrefetchOutcome>;

  constructor(private readonly o: RetentionRecorderOptions) {
    if (o.restore) this.prefetch = o.restore;
  }

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  private line(fields: Record<string, unknown>): void {
    this.o.decisionLog?.(
      decisionLine(this.now(), "retention", { worker: this.o.worker, ...fields }),
    );
  }

  decide(
    id: string,
    tokens: number,
    tools: readonly (string | null)[],
  ): { action: RetentionAction; ttlSeconds: number } {
    const d = decideRetention(this.o.model, tools, {
      ...this.o.costs,
      tokens,
      pageSize: this.o.pageSize(),
    });
    this.open.delete(id);
    this.open.set(id, {
      action: d.action,
      tools,
      predicted: d.predictedGapSeconds,
      at: this.now(),
      settled: false,
    });
    if (this.open.size > (this.o.maxOpen ?? 100_000))
      this.open.delete(this.open.keys().next().value as string);
    this.o.metrics.decisions.inc({ worker: this.o.worker, action: d.action });
    this.o.metrics.gaps.observe({ kind: "predicted" }, d.predictedGapSeconds);
    const w = d.waste;
    this.line({
      program: id,
      action: d.action,
      ttl_seconds: d.ttlSeconds,
      tokens,
      tools,
      predicted_gap_seconds: d.predictedGapSeconds,
      waste_keep: w.keep,
      waste_park: w.park,
      waste_let_go: w.letGo,
    });
    const out = { action: d.action, ttlSeconds: d.ttlSeconds };
    this.o.onDecision?.(id, out);
    return out;
  }

  private settle(
    id: string,
    e: Open,
    outcome: RetentionOutcome,
    fields: Record<string, unknown>,
  ): void {
    e.settled = true;
    this.o.metrics.outcomes.inc({ worker: this.o.worker, action: e.action, outcome });
    this.line({
      program: id,
      action: e.action,
      outcome,
      predicted_gap_seconds: e.predicted,
      ...fields,
    });
  }

  lapsed(id: string, why: "ttl" | "lease" | "pressure"): void {
    const e = this.open.get(id);
    if (e && !e.settled) this.settle(id, e, "wasted", { lapsed: why });
  }

  returned(id: string): void {
    const e = this.open.get(id);
    if (!e) return;
    this.open.delete(id);
    const actual = (this.now() - e.at) / 1000;
    if (this.o.learnsGaps !== false)
      for (const t of e.tools.length ? e.tools : [null]) this.o.model.record(t, actual);
    this.o.metrics.gaps.observe({ kind: "actual" }, actual);
    if (!e.settled)
      this.settle(id, e, e.action === "let_go" ? "recomputed" : "hit", {
        actual_gap_seconds: actual,
      });
    else
      this.line({
        program: id,
        action: e.action,
        predicted_gap_seconds: e.predicted,
        actual_gap_seconds: actual,
      });
  }

  prefetched(id: string, outcome: PrefetchOutcome | "timeout"): void {
    this.o.metrics.prefetches.inc({ worker: this.o.worker, outcome });
    this.line({ program: id, action: "prefetch", outcome });
  }
}
