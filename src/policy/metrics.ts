// The policies' Prometheus metrics, registered on the gateway's registry (one /metrics).
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export class PolicyMetrics {
  readonly decisions: Counter<"policy" | "action" | "reason">;
  readonly guarded: Counter<"policy" | "type" | "verdict">;
  readonly badInput: Counter<"kind">;
  readonly acks: Counter<"policy" | "type" | "status">;
  readonly pinBlocks: Gauge<"worker">;
  readonly pinPeak: Gauge<"worker">;
  readonly toolWait: Histogram<"kind">;
  readonly pinOutcomes: Counter<"kind" | "outcome">;
  readonly pinOpen: Gauge<"kind" | "outcome">;
  /** What is pinned now (the budget view), read when /metrics is scraped. */
  openPins: () => { kind: string; outcome: string; blocks: number }[] = () => [];

  constructor(registry: Registry = new Registry()) {
    const registers = [registry];
    const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Counter<L>({ name, help, labelNames, registers });
    const gauge = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Gauge<L>({ name, help, labelNames, registers });
    this.decisions = counter(
      "kvctl_policy_decisions_total",
      "Policy decisions by policy, action (a command type, or skip) and reason",
      ["policy", "action", "reason"],
    );
    this.guarded = counter(
      "kvctl_policy_guarded_total",
      "Commands the guards held back, by policy, command type and verdict (rate_limited, coalesced)",
      ["policy", "type", "verdict"],
    );
    this.badInput = counter(
      "kvctl_policy_bad_input_total",
      "Hints and markers the policies could not use, by kind (the request is still served)",
      ["kind"],
    );
    this.acks = counter(
      "kvctl_policy_acks_total",
      "Outcomes of policy commands as the policies saw them, by policy, type and status",
      ["policy", "type", "status"],
    );
    this.pinBlocks = gauge(
      "kvctl_policy_pin_budget_used_blocks",
      "Blocks the gateway holds pinned on each worker (its budget view)",
      ["worker"],
    );
    this.pinPeak = gauge(
      "kvctl_policy_pin_budget_peak_blocks",
      "Most blocks the gateway held pinned on each worker at once",
      ["worker"],
    );
    this.pinOutcomes = counter(
      "kvctl_policy_pinned_blocks_total",
      "Pinned blocks whose last hold went, by the kind of that hold and outcome: hit (served from the worker's cache while pinned) or wasted (never)",
      ["kind", "outcome"],
    );
    this.pinOpen = new Gauge({
      name: "kvctl_policy_pinned_blocks_open",
      help: "Blocks pinned now, by the kind of their newest hold and whether they were hit yet (outcome hit) or not (wasted so far)",
      labelNames: ["kind", "outcome"],
      registers,
      collect: () => {
        this.pinOpen.reset();
        for (const o of this.openPins())
          this.pinOpen.set({ kind: o.kind, outcome: o.outcome }, o.blocks);
      },
    });
    this.toolWait = new Histogram({
      name: "kvctl_policy_tool_wait_seconds",
      help: "Tool waits: the predicted duration (median of the tool's distribution) and the actual one",
      labelNames: ["kind"],
      buckets: [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600],
      registers,
    });
  }
}
