// bench:agent's verdict (bench/agent/verdict.ts): percentiles over every returning turn of every
// run, and no verdict when the comparison is not a fair one.
import { describe, expect, it } from "vitest";
import { commonExcess, requestExcess } from "../bench/agent/common-excess.js";
import type { RequestRecord } from "../bench/agent/driver.js";
import {
  type ConfigSummary,
  judge,
  limits,
  percentile,
  type RunFigures,
  summarize,
  unfairness,
} from "../bench/agent/verdict.js";

function run(recomputed: number, ttft: number[], o: Partial<RunFigures> = {}): RunFigures {
  return {
    recomputed_tokens: recomputed,
    prompt_tokens: 10_000,
    errors: 0,
    ttft_returning: ttft,
    session_completion: [10, 20],
    commands: null,
    ideal_recomputed: 50,
    pin_peak_blocks: null,
    flood_unserved: 0,
    ...o,
  };
}

const FAIR = ["cache_aware_adm", "smg_adm"];

describe("bench:agent verdict", () => {
  it("a configuration's floor is its median run's own (each run served its own generated text)", () => {
    const s = summarize([
      run(300, [1], { ideal_recomputed: 90 }),
      run(100, [1], { ideal_recomputed: 70 }),
      run(200, [1], { ideal_recomputed: 80 }),
    ]);
    expect(s.recomputed_tokens).toBe(200);
    expect(s.ideal_recomputed).toBe(80);
  });

  it("takes percentiles over the turns of all runs pooled, not medians of each run's worst turn", () => {
    // Each run has one slow turn: a per-run p99 is that turn every time; pooled, p50 stays low.
    const runs = [
      run(300, [100, 100, 100, 900]),
      run(100, [100, 100, 100, 950]),
      run(200, [100, 100, 100, 1000]),
    ];
    const s = summarize(runs);
    expect(s.returning_turns).toBe(12);
    expect(s.ttft_returning_ms).toEqual({ p50: 100, p90: 950, p99: 1000 });
    expect(s.recomputed_tokens).toBe(200); // the median run
    expect(s.session_completion_s).toEqual({ mean: 15, p90: 20 });
    expect(percentile([], 0.5)).toBeNull();
  });

  it("sums errors over runs and refuses a verdict when any configuration had one", () => {
    const configs = {
      kvctl: summarize([run(100, [1])]),
      cache_aware_adm: summarize([run(200, [2]), run(200, [2], { errors: 2 })]),
      smg_adm: summarize([run(300, [3])]),
    };
    expect(configs.cache_aware_adm.errors).toBe(2);
    const v = judge(configs, {}, FAIR, "cache_aware_adm", 50);
    expect(v.valid).toBe(false);
    expect(v.problems).toEqual(["cache_aware_adm had 2 failed requests"]);
    expect(v.best_fair_peer).toBeNull();
    expect(v.gap_closed_vs_best_fair).toBeNull();
  });

  it("the pin budget and the flood are checked on every run of every configuration, not the median run's", () => {
    const configs = {
      kvctl: summarize([
        run(100, [1], { pin_peak_blocks: 256 }),
        run(90, [1], { pin_peak_blocks: 280 }),
        run(110, [1], { pin_peak_blocks: 250 }),
      ]),
      thunder: summarize([run(200, [2], { flood_unserved: 1 })]),
      smg_adm: summarize([run(300, [3])]),
    };
    expect(configs.kvctl.pin_peak_blocks).toBe(280);
    const l = limits(configs, 256);
    expect(l).toEqual({
      pin_budget_blocks: 256,
      pin_peak_blocks: 280,
      pin_budget_kept: false,
      flood_served_in_full: false,
      broken: [
        "kvctl run 2 pinned 280 blocks on one worker, over the budget of 256",
        "thunder run 1 left 1 flood requests unserved",
      ],
    });
    const ok = limits(
      {
        kvctl: summarize([run(100, [1], { pin_peak_blocks: 256 })]),
        smg_adm: configs.smg_adm,
        gone: null,
      },
      256,
    );
    expect([ok.pin_budget_kept, ok.flood_served_in_full, ok.broken]).toEqual([true, true, []]);
  });

  it("refuses a verdict when a configuration did not start, naming it with its reason", () => {
    const configs = {
      kvctl: summarize([run(100, [1])]),
      cache_aware_adm: summarize([run(200, [2])]),
      smg_adm: null,
    };
    const v = judge(configs, { smg_adm: "smg exited 1: port in use" }, FAIR, "cache_aware_adm", 50);
    expect(v.valid).toBe(false);
    expect(v.problems).toEqual(["smg_adm did not run: smg exited 1: port in use"]);
  });

  it("refuses a verdict when a configuration served more than 0.5% more or less prompt than the others", () => {
    const ok = (n: number) => summarize([run(n, [1], { prompt_tokens: 10_040 })]);
    expect(
      unfairness(
        { a: ok(1), b: ok(2), c: summarize([run(3, [1], { prompt_tokens: 10_000 })]) },
        {},
      ),
    ).toEqual([]);
    const off = unfairness(
      { a: ok(1), b: ok(2), c: summarize([run(3, [1], { prompt_tokens: 9_900 })]) },
      {},
    );
    expect(off).toHaveLength(1);
    expect(off[0]).toMatch(/^c run 1 served 9900 prompt tokens, 1.39% off the others' 10040$/);
  });

  it("reads the best fair peer, the gap closed and the TTFT p90 ratios on a fair comparison", () => {
    const configs: Record<string, ConfigSummary | null> = {
      kvctl: summarize([run(150, [80, 90, 100])]),
      cache_aware_adm: summarize([run(250, [100, 100, 200])]),
      smg_adm: summarize([run(200, [100, 150, 160])]),
      lru: summarize([run(100, [50, 50, 50])]),
    };
    const v = judge(configs, {}, FAIR, "cache_aware_adm", 100);
    expect(v.valid).toBe(true);
    expect(v.best_fair_peer).toBe("smg_adm"); // lru recomputes least, but it is context, not a fair peer
    expect(v.gap_closed_vs_best_fair).toBe(0.5); // (200 - 150) / (200 - 100)
    expect(v.gap_closed.cache_aware_adm).toBe(0.667);
    expect(v.gap_closed.lru).toBeNull(); // at the ideal floor there is no gap to close
    expect(v.ttft_p90_ratio_vs_best_fair).toBe(0.625); // 100 / 160
    expect(v.ttft_p90_ratio_vs_admission_only).toBe(0.5); // 100 / 200
  });

  it("the attainable floor adds, request by request, the fewest tokens any run recomputed beyond the ideal cache", () => {
    const rec = (
      session: string,
      sentMs: number,
      cached: number,
      ideal: number | undefined,
      ok = true,
    ): RequestRecord => ({
      session,
      kind: "tool",
      returning: false,
      promptTokens: 100,
      cachedTokens: cached,
      completionTokens: 1,
      hostTokens: 0,
      storageTokens: 0,
      ttftMs: 1,
      sentMs,
      doneMs: sentMs + 1,
      prompt: { messages: [], tools: [] },
      gapKind: "tool",
      gapMs: 0,
      rewrite: false,
      idealCachedTokens: ideal,
      worker: null,
      ok,
    });
    // Requests are the session's n-th in send order, whatever order the records come in.
    const a = requestExcess([rec("s", 5, 40, 64), rec("s", 1, 0, 16), rec("t", 2, 48, 32)]);
    expect(a && [...a]).toEqual([
      ["s#0", 16],
      ["t#0", 0],
      ["s#1", 24],
    ]);
    const b = requestExcess([rec("s", 1, 16, 16), rec("s", 4, 32, 64), rec("t", 3, 0, 32, false)]);
    // s#0: one run served it ideally; s#1: both paid at least 24; t#0 failed in b, so nothing is common.
    expect(commonExcess([a, b, null])).toBe(24);
    expect(commonExcess([null])).toBeNull();
    expect(requestExcess([rec("s", 1, 0, undefined)])).toBeNull();
  });
});
