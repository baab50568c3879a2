// bench:agent's trace generator and ablation table, without servers: compactions come where the
// planner's size estimate nears the context limit (before a user turn, or inside a tool loop) and
// nowhere else; every configuration replays the same plan; the ablation folds the gateway's command
// counters into sent / acked-by-status per type and measures each rule against cache_aware.
import { describe, expect, it } from "vitest";
import { ablationRows, commandsByType } from "../bench/agent/ablation.js";
import { plannedSpanMs } from "../bench/agent/calibrate.js";
import { l3Since } from "../bench/agent/measure.js";
import type { ConfigSummary } from "../bench/agent/verdict.js";
import {
  type BfclWorkload,
  DEFAULT_SHAPE,
  planWorkload,
  SUMMARY_OVERHEAD_CHARS,
} from "../bench/agent/workload.js";
import { promptJson } from "../bench/agent/prompt-json.js";

const call = (n: number) => ({
  name: "bash",
  arguments: { command: `cat f${n}` },
  result: "x".repeat(1000),
});
const workload = (turns: { user: string; calls: ReturnType<typeof call>[] }[]): BfclWorkload => ({
  system_prompt: "s".repeat(100),
  sessions: [{ id: "a", classes: [], tools: [], turns }],
});
// 1 char per token and a limit of 10,000 tokens at 80%: the history may hold about 8,000 characters.
const shape = {
  ...DEFAULT_SHAPE,
  charsPerToken: 1,
  contextLimitTokens: 10_000,
  compactAtShare: 0.8,
};

describe("bench:agent workload: compaction near the context limit", () => {
  it("compacts inside a tool loop once the estimate passes the limit, then again only after it refills", () => {
    const w = workload([
      { user: "u".repeat(50), calls: Array.from({ length: 20 }, (_, i) => call(i)) },
    ]);
    const plan = planWorkload(w, shape, 1);
    const at = plan[0].turns[0].calls.flatMap((c, i) => (c.compactBefore ? [i] : []));
    // ~1,020 characters a step: the 8th step would pass 8,000; after compaction it refills by the 15th.
    expect(at).toEqual([7, 14]);
    expect(plan[0].turns[0].compact).toBe(false);
    expect(planWorkload(w, shape, 1)).toEqual(plan);
  });

  it("compacts before a user turn when the history already nears the limit, and never under it", () => {
    const w = workload([
      { user: "first", calls: Array.from({ length: 7 }, (_, i) => call(i)) },
      { user: "second".repeat(200), calls: [] },
    ]);
    const plan = planWorkload(w, shape, 1);
    expect(plan[0].turns.map((t) => t.compact)).toEqual([false, true]);
    expect(
      planWorkload(w, { ...shape, contextLimitTokens: 100_000 }, 1).flatMap((s) =>
        s.turns.map((t) => t.compact || t.calls.some((c) => c.compactBefore)),
      ),
    ).toEqual([false, false]);
    expect(SUMMARY_OVERHEAD_CHARS).toBeGreaterThan(0);
  });

  it("gives tool calls the shape's reasoning span", () => {
    const plan = planWorkload(
      workload([{ user: "u", calls: [call(1)] }]),
      { ...shape, toolReasoningChars: 48 },
      1,
    );
    expect(plan[0].turns[0].calls[0].reasoningChars).toBe(48);
  });
});

const summary = (
  recomputed: number,
  p90: number | null,
  commands: Record<string, number> | null,
): ConfigSummary => ({
  recomputed_tokens: recomputed,
  prompt_tokens: 1000,
  errors: 0,
  returning_turns: 1,
  ttft_returning_ms: { p50: p90, p90, p99: p90 },
  session_completion_s: { mean: 1, p90: 1 },
  commands,
  ideal_recomputed: null,
  pin_peak_blocks: null,
  runs: [],
});

describe("bench:agent ablation table", () => {
  it("folds command counters per type; a rule alone is read against thunder (the same admission, no rule), the defaults less one against kvctl", () => {
    expect(
      commandsByType({
        "Prune:sent": 3,
        "Prune:acked:applied": 2,
        "Prune:acked:noop": 1,
        "Warm:sent": 1,
        "Warm:failed": 1,
      }),
    ).toEqual({
      Prune: { sent: 3, acked: { applied: 2, noop: 1 }, failed: 0 },
      Warm: { sent: 1, acked: {}, failed: 1 },
    });
    const rows = ablationRows({
      thunder: summary(500, 90, null),
      cache_aware: summary(100, 10, null),
      kvctl: summary(300, 50, {}),
      kvctl_prune: summary(450, 80, { "Prune:sent": 2, "Prune:acked:applied": 2 }),
      kvctl_warm: null,
      kvctl_no_pins: summary(280, 40, { "Cache:sent": 1, "Cache:acked:applied": 1 }),
      kvctl_session_radix: summary(200, 30, {}),
    });
    expect(rows).toEqual([
      {
        rule: "prune",
        base: "thunder",
        commands: { Prune: { sent: 2, acked: { applied: 2 }, failed: 0 } },
        sent: 2,
        acked: 2,
        recomputed_tokens: 450,
        recomputed_delta: -50,
        ttft_p90_ms: 80,
        base_ttft_p90_ms: 90,
      },
      {
        rule: "no_pins",
        base: "kvctl",
        commands: { Cache: { sent: 1, acked: { applied: 1 }, failed: 0 } },
        sent: 1,
        acked: 1,
        recomputed_tokens: 280,
        recomputed_delta: -20,
        ttft_p90_ms: 40,
        base_ttft_p90_ms: 50,
      },
    ]);
    expect(
      ablationRows({ kvctl_prune: summary(1, 1, null), kvctl_no_pins: summary(1, 1, null) }),
    ).toEqual([]);
  });
});

describe("bench:agent gpu_shaped sizing and shared workers", () => {
  it("plans a trace's span as its latest session's start plus its human and tool gaps, at the time scale", () => {
    const w: BfclWorkload = {
      system_prompt: "s",
      sessions: [
        {
          id: "a",
          classes: [],
          tools: [],
          turns: [
            { user: "u", calls: [call(1), call(2)] },
            { user: "v", calls: [] },
          ],
        },
        { id: "b", classes: [], tools: [], turns: [{ user: "u", calls: [] }] },
      ],
    };
    const slow = planWorkload(w, { ...DEFAULT_SHAPE, timeScale: 1 }, 3);
    const a = slow[0];
    const aEnd =
      a.startMs + a.turns[1].idleMs + a.turns[0].calls[0].toolMs + a.turns[0].calls[1].toolMs;
    expect(a.turns[1].idleMs).toBeGreaterThan(0);
    expect(plannedSpanMs(slow)).toBe(Math.max(aEnd, slow[1].startMs));
    // Four times the scale, a quarter of the span (each duration is rounded to the millisecond).
    expect(
      Math.abs(
        plannedSpanMs(planWorkload(w, { ...DEFAULT_SHAPE, timeScale: 4 }, 3)) -
          plannedSpanMs(slow) / 4,
      ),
    ).toBeLessThanOrEqual(3);
    expect(plannedSpanMs([])).toBe(0);
  });

  it("reads HiCache's counters as their growth over one configuration's run", () => {
    const before = {
      backed_up: 10,
      query_hit: 0,
      prefetched: 5,
      unfulfilled: { deadline: 2 },
      deferred: {},
      dropped: { evict: 100 },
    };
    const after = {
      backed_up: 30,
      query_hit: 4,
      prefetched: 5,
      unfulfilled: { deadline: 2, host_capacity: 3 },
      deferred: { busy: 1 },
      dropped: { evict: 160 },
    };
    expect(l3Since(after, before)).toEqual({
      backed_up: 20,
      query_hit: 4,
      prefetched: 0,
      unfulfilled: { host_capacity: 3 },
      deferred: { busy: 1 },
      dropped: { evict: 60 },
    });
  });
});

describe("bench:agent prompt JSON", () => {
  it("spells tool-call arguments as the chat template's json() macro spells the parsed object (Dynamo's side)", () => {
    expect(promptJson({ b: 2, a: 'x "y"\n', C: [true, null, 1.5], d: {} })).toBe(
      '{"a": "x \\"y\\"\\n", "b": 2, "C": [true, null, 1.5], "d": {}}',
    );
    expect(promptJson("a\\b")).toBe('"a\\\\b"');
  });
});
