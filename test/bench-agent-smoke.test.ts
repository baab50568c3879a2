// `npm run bench:agent -- --json --smoke`: two BFCL sessions in one tiny saturated regime through
// kvctl (its gateway, agent policy, program admission and NATS commands) and the fair peer thunder
// (the gateway with the same program admission, no-op policy) on real patched SGLang servers on CPU. The bench
// exits 1 with no verdict when a configuration did not run, had errors or served a different amount
// of prompt, so exit 0 with a verdict is itself the check that the comparison held.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { agentModel } from "../bench/agent/stack.js";
import { parseRecordedRun, recordedWorkload } from "../src/sim/workload/recorded.js";
import { readTrace } from "../src/sim/workload/trace/read.js";
import { writeTrace } from "../src/sim/workload/trace/write.js";
import { runBenchSmoke } from "./helpers/bench-smoke.js";
import { expectReplays } from "./helpers/recorded-replay.js";

// Every run's request trace, for the check that kvctl sim replays it with the real ids.
const traceDir = mkdtempSync(join(tmpdir(), "kvctl-agent-trace-"));
process.env.KVCTL_BENCH_TRACE = join(traceDir, "t");
afterAll(() => rmSync(traceDir, { recursive: true, force: true }));

interface Config {
  role: string;
  errors: number;
  prompt_tokens: number;
  recomputed_tokens: number;
  ideal_recomputed: number | null;
  returning_turns: number;
  ttft_returning_ms: { p50: number | null; p90: number | null; p99: number | null };
  session_completion_s: { mean: number | null; p90: number | null };
  commands: Record<string, number> | null;
  extra: { flood_served: string };
}
interface Regime {
  ideal_recomputed: number | null;
  configs: Record<string, Config | null>;
  not_run: Record<string, string>;
  valid: boolean;
  problems: string[];
  best_fair_peer: string | null;
  gap_closed_vs_best_fair: number | null;
  ttft_p90_ratio_vs_best_fair: number | null;
  ttft_p90_ratio_vs_admission_only: number | null;
  tool_gap_over_prefill: number | null;
}

describe("npm run bench:agent -- --json --smoke", () => {
  it("runs kvctl and a fair peer end to end and gives a verdict", {
    timeout: 900_000,
  }, async () => {
    const r = await runBenchSmoke("agent", 880_000);
    expect(r.code, r.tail).toBe(0);
    const j = r.json as { bench: string; runs: number; regimes: Record<string, Regime> } | null;
    expect(j, r.tail).not.toBeNull();
    expect(j?.bench).toBe("agent");
    expect(Object.keys(j?.regimes ?? {})).toEqual(["saturated"]);
    const s = j?.regimes.saturated as Regime;
    expect(s.not_run).toEqual({});
    expect(s.valid, s.problems.join("; ")).toBe(true);
    expect(s.best_fair_peer).toBe("thunder");
    expect(s.ideal_recomputed).toBeGreaterThan(0);
    for (const name of ["kvctl", "thunder"]) {
      const c = s.configs[name] as Config;
      expect(c, name).not.toBeNull();
      expect(c.errors, name).toBe(0);
      expect(c.prompt_tokens, name).toBeGreaterThan(0);
      // Each run's floor is of its own prompts (generated answers join later prompts, so texts differ a little).
      expect(c.ideal_recomputed, name).toBeGreaterThan(0);
      expect(c.recomputed_tokens, name).toBeGreaterThanOrEqual(c.ideal_recomputed as number);
      expect(s.ideal_recomputed, name).toBeLessThanOrEqual(c.ideal_recomputed as number);
      expect(c.extra.flood_served, name).toBe("2/2");
      expect(c.session_completion_s.mean, name).toBeGreaterThan(0);
      if (c.returning_turns > 0) expect(c.ttft_returning_ms.p90, name).toBeGreaterThan(0);
    }
    // Equal work: the verdict held, so the two served prompt totals within 0.5% of each other.
    const [a, b] = [s.configs.kvctl as Config, s.configs.thunder as Config];
    expect(Math.abs(a.prompt_tokens - b.prompt_tokens) / a.prompt_tokens).toBeLessThanOrEqual(
      0.005,
    );
    // Each run's trace is a sim workload with the real ids, the planned waits, reasoning and markers.
    const vocab = JSON.parse(readFileSync(join(agentModel(), "config.json"), "utf8")).vocab_size;
    for (const name of ["kvctl", "thunder"]) {
      const text = readFileSync(join(traceDir, `t.saturated.${name}.run1.requests.jsonl`), "utf8");
      const records = parseRecordedRun(text, vocab);
      const w = recordedWorkload(records, { vocab, family: "bfcl" });
      expectReplays(w, records);
      expect(w.meta, name).toMatchObject({
        prompt_ids_mismatched: 0,
        reasoning_recorded: true,
        markers_recorded: true,
      });
      expect(readTrace(writeTrace(w, { blockSize: 16 }))).toEqual(w);
    }
    // The policy sent commands and the workers applied them ("Cache:acked:applied" and the like).
    const applied = Object.entries(a.commands ?? {}).filter(([k]) => k.endsWith(":acked:applied"));
    expect(
      applied.reduce((n, [, v]) => n + v, 0),
      JSON.stringify(a.commands),
    ).toBeGreaterThan(0);
  });
});
