// Program admission with retention (program-admission.ts + program-retention.ts): each tool
// boundary's decision is applied to the program's slot, its outcome and gaps are recorded, and a
// parked program's blocks are restored before its next request is admitted, bounded by a deadline.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ProgramGate, type ProgramLimits } from "../src/gateway/program-admission.js";
import { RetentionMetrics, RetentionRecorder } from "../src/policy/program-retention.js";
import { DurationModel } from "../src/policy/duration-model.js";

const LIMITS: ProgramLimits = {
  maxPrograms: 1,
  capacityTokens: 100_000,
  pauseAt: 0.95,
  resumeBelow: 0.8,
  holdMs: 60_000,
  prefetchDeadlineMs: 500,
};
// As in retention-decision.test.ts: 4000 tokens re-prefill in 1 s and restore in 0.1 s.
const COSTS = {
  prefillTokensPerSecond: 4000,
  restoreTokensPerSecond: 40_000,
  deviceHoldCostPerBlockSecond: 0.0001,
  hostHoldCostPerBlockSecond: 0.00001,
  leaseSeconds: 300,
  taus: [1, 2, 5],
};

function setup(
  restore?: (p: string) => Promise<"resident" | "partial" | "failed">,
  released: [string, string][] = [],
) {
  const model = new DurationModel({
    priorMeanSeconds: 10,
    minSamples: 4,
    maxSamples: 100,
    maxTools: 8,
  });
  for (const x of [1, 1, 2, 2]) model.record("grep", x); // keep, TTL 2 s
  for (const x of [100, 100, 200, 200]) model.record("build", x); // park
  for (const x of [1000, 1000, 1000, 1000]) model.record("crawl", x); // let go (small contexts)
  const registry = new Registry();
  const metrics = new RetentionMetrics(registry);
  const lines: Record<string, unknown>[] = [];
  const rec = new RetentionRecorder({
    worker: "w0",
    model,
    costs: COSTS,
    pageSize: () => 16,
    metrics,
    decisionLog: (l) => lines.push(JSON.parse(l)),
    restore,
  });
  return {
    gate: new ProgramGate(LIMITS, rec, (p, why) => released.push([p, why])),
    metrics,
    lines,
    model,
  };
}

async function count(
  c: { get(): Promise<{ values: { labels: Record<string, unknown>; value: number }[] }> },
  labels: Record<string, string>,
): Promise<number> {
  const v = (await c.get()).values.find((x) =>
    Object.entries(labels).every(([k, val]) => x.labels[k] === val),
  );
  return v?.value ?? 0;
}

async function settled(p: Promise<void>): Promise<boolean> {
  let done = false;
  void p.then(() => {
    done = true;
  });
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return done;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("ProgramGate with retention", () => {
  it("keep: the program holds its slot for the TTL; its return in time is a hit with its actual gap recorded", async () => {
    vi.useFakeTimers();
    const { gate, metrics, lines } = setup();
    const a = gate.enter(4000, "a");
    a.release(true, ["grep"]);
    expect(await count(metrics.decisions, { action: "keep" })).toBe(1);
    expect(gate.enter(10, "b").queued).toBe(true); // a keeps the only slot
    vi.advanceTimersByTime(1500);
    const a2 = gate.enter(4000, "a");
    expect(a2.queued).toBe(false);
    expect(await count(metrics.outcomes, { action: "keep", outcome: "hit" })).toBe(1);
    const ret = lines.find((l) => l.outcome === "hit");
    expect(ret).toMatchObject({
      event: "retention",
      program: "a",
      action: "keep",
      predicted_gap_seconds: 2,
      actual_gap_seconds: 1.5,
    });
  });

  it("keep: past the TTL the slot goes and the decision is wasted; the late return still measures the gap", async () => {
    vi.useFakeTimers();
    const { gate, metrics, lines, model } = setup();
    gate.enter(4000, "a").release(true, ["grep"]);
    const b = gate.enter(10, "b");
    expect(b.queued).toBe(true);
    vi.advanceTimersByTime(2000); // TTL 2 s
    expect(await settled(b.ready)).toBe(true);
    expect(await count(metrics.outcomes, { action: "keep", outcome: "wasted" })).toBe(1);
    vi.advanceTimersByTime(1000);
    b.release(false);
    gate.enter(4000, "a");
    expect(lines.at(-1)).toMatchObject({ program: "a", action: "keep", actual_gap_seconds: 3 });
    expect(model.count("grep")).toBe(5);
  });

  it("park: the slot goes at once; the return is admitted only once the restore says resident", async () => {
    vi.useFakeTimers();
    let resolve: (s: "resident") => void = () => undefined;
    const restores: string[] = [];
    const { gate, metrics } = setup((p) => {
      restores.push(p);
      return new Promise((r) => {
        resolve = r;
      });
    });
    gate.enter(4000, "a").release(true, ["build"]);
    expect(await count(metrics.decisions, { action: "park" })).toBe(1);
    const b = gate.enter(10, "b");
    expect(b.queued).toBe(false); // a's slot was freed for b
    b.release(false);
    vi.advanceTimersByTime(120_000);
    const a2 = gate.enter(4000, "a");
    expect(restores).toEqual(["a"]);
    expect(await settled(a2.ready)).toBe(false);
    expect(gate.enter(10, "c").queued).toBe(true); // the restoring program holds the slot
    resolve("resident");
    expect(await settled(a2.ready)).toBe(true);
    expect(await count(metrics.prefetches, { outcome: "resident" })).toBe(1);
    expect(await count(metrics.outcomes, { action: "park", outcome: "hit" })).toBe(1);
  });

  it("park: a restore that never answers admits at the deadline and is counted; a partial one admits at once", async () => {
    vi.useFakeTimers();
    const { gate, metrics } = setup(() => new Promise(() => undefined));
    gate.enter(4000, "a").release(true, ["build"]);
    const a2 = gate.enter(4000, "a");
    vi.advanceTimersByTime(499);
    expect(await settled(a2.ready)).toBe(false);
    vi.advanceTimersByTime(1);
    expect(await settled(a2.ready)).toBe(true);
    expect(await count(metrics.prefetches, { outcome: "timeout" })).toBe(1);
    const p = setup(async () => "partial");
    p.gate.enter(4000, "x").release(true, ["build"]);
    expect(await settled(p.gate.enter(4000, "x").ready)).toBe(true);
    expect(await count(p.metrics.prefetches, { outcome: "partial" })).toBe(1);
  });

  it("park: a lease that runs out while parked is wasted and the program comes back as a new one, re-prefilled, not wedged", async () => {
    vi.useFakeTimers();
    const restores: string[] = [];
    const { gate, metrics } = setup(async (p) => {
      restores.push(p);
      return "resident";
    });
    gate.enter(4000, "a").release(true, ["build"]);
    vi.advanceTimersByTime(300_000);
    expect(await count(metrics.outcomes, { action: "park", outcome: "wasted" })).toBe(1);
    const a2 = gate.enter(4000, "a");
    expect(a2.queued).toBe(false);
    expect(restores).toEqual([]);
  });

  it("let go: the slot goes, nothing is restored, and the return is counted recomputed", async () => {
    vi.useFakeTimers();
    const restores: string[] = [];
    const { gate, metrics } = setup(async (p) => {
      restores.push(p);
      return "resident";
    });
    gate.enter(160, "a").release(true, ["crawl"]);
    expect(await count(metrics.decisions, { action: "let_go" })).toBe(1);
    expect(gate.enter(10, "b").queued).toBe(false);
    const a2 = gate.enter(160, "a");
    expect(a2.queued).toBe(true); // b holds the slot; a waits ahead of newcomers
    expect(restores).toEqual([]);
    expect(await count(metrics.outcomes, { action: "let_go", outcome: "recomputed" })).toBe(1);
  });

  it("tells which programs it lets go (keep and park are not: their KV is still kept)", () => {
    vi.useFakeTimers();
    const released: [string, string][] = [];
    const { gate } = setup(async () => "resident", released);
    gate.enter(160, "a").release(true, ["crawl"]);
    expect(released).toEqual([["a", "let_go"]]);
    gate.enter(4000, "b").release(true, ["build"]); // park
    gate.enter(4000, "c").release(true, ["grep"]); // keep
    gate.enter(10, "d").release(); // no tool call: the program ends, its session may come back
    expect(released).toEqual([["a", "let_go"]]);
  });

  it("tells which programs it pauses under KV pressure", () => {
    vi.useFakeTimers();
    const released: [string, string][] = [];
    const gate = new ProgramGate(
      { ...LIMITS, maxPrograms: 3, capacityTokens: 10_000 },
      null,
      (p, why) => released.push([p, why]),
    );
    gate.enter(6000, "a").release(true, ["grep"]);
    gate.enter(3000, "b").release(true, ["grep"]);
    expect(released).toEqual([]); // 9000 of 10000: under pauseAt
    gate.enter(9000, "a").release(true, ["grep"]); // a's context grew: 12000, over pauseAt
    expect(released[0]).toEqual(["b", "pressure"]); // the smallest first
  });

  it("a client gone while its blocks come back gives the slot to the next waiter", async () => {
    vi.useFakeTimers();
    const { gate } = setup(() => new Promise(() => undefined));
    gate.enter(4000, "a").release(true, ["build"]);
    const a2 = gate.enter(4000, "a");
    const c = gate.enter(10, "c");
    expect(c.queued).toBe(true);
    a2.release();
    vi.advanceTimersByTime(500);
    expect(await settled(c.ready)).toBe(true);
    expect(gate.holding).toBe(1);
  });
});
