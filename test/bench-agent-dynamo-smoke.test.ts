// `npm run bench:agent -- --json --smoke --configs dynamo_kv,dynamo_thunder`: NVIDIA Dynamo's two
// peers (its KV router, and ThunderAgent's program scheduler over it) start on CPU over real
// `dynamo.sglang` workers, serve one BFCL session of the trace through Dynamo's frontend with no
// failed request, and are measured from the same per-response usage as every other row. No kvctl
// row runs here (the full bench compares them), so the bench refuses a verdict and names why;
// the router queue is sized from a given median prompt, since no earlier row measures it.
import { describe, expect, it } from "vitest";
import { dynamoInstalled } from "./helpers/dynamo.js";
import { runBenchSmoke } from "./helpers/bench-smoke.js";

interface Config {
  role: string;
  errors: number;
  prompt_tokens: number;
  recomputed_tokens: number;
  extra: {
    flood_served: string;
    l3: unknown;
    dynamo: { router_queue_threshold: number; thunder_programs: number | null } | null;
  };
}

if (!dynamoInstalled())
  throw new Error("Dynamo is not installed: run python/setup_venv.sh (KVCTL_DYNAMO=0 skips it)");

describe("npm run bench:agent -- --smoke with the Dynamo peers", () => {
  it("starts dynamo_kv and dynamo_thunder and serves the trace through each with no failed request", {
    timeout: 900_000,
  }, async () => {
    const r = await runBenchSmoke("agent", 880_000, [
      "--configs",
      "dynamo_kv,dynamo_thunder",
      "--sessions",
      "1",
      "--dynamo-median-prompt",
      "2048",
    ]);
    const j = r.json as {
      regimes: Record<
        string,
        {
          configs: Record<string, Config | null>;
          not_run: Record<string, string>;
          problems: string[];
        }
      >;
    } | null;
    expect(j, r.tail).not.toBeNull();
    const s = j!.regimes.saturated;
    expect(s.not_run, r.tail).toEqual({});
    // No kvctl row in this run, so no verdict. dynamo_thunder renders prompts with Dynamo's own
    // preprocessor (ThunderAgent sees no program behind SGLang's chat processor), so its prompt
    // total may differ from dynamo_kv's: the bench names that too, and a full run is refused for it.
    expect(s.problems).toContain("kvctl did not run");
    for (const p of s.problems.filter((x) => x !== "kvctl did not run"))
      expect(p).toMatch(/^dynamo_(kv|thunder) run 1 served \d+ prompt tokens/);
    expect(r.code).toBe(1);
    for (const name of ["dynamo_kv", "dynamo_thunder"]) {
      const c = s.configs[name] as Config;
      expect(c, name).not.toBeNull();
      expect(c.role, name).toBe("fair");
      expect(c.errors, name).toBe(0);
      expect(c.prompt_tokens, name).toBeGreaterThan(0);
      expect(c.recomputed_tokens, name).toBeGreaterThan(0);
      expect(c.recomputed_tokens, name).toBeLessThan(c.prompt_tokens);
      expect(c.extra.flood_served, name).toBe("2/2");
      expect(c.extra.l3, name).toBeNull(); // Dynamo's workers serve no /metrics
      // 2 requests per worker of 2048 tokens over the card's max_num_batched_tokens (SGLang's max_prefill_tokens).
      expect(c.extra.dynamo?.router_queue_threshold, name).toBeCloseTo((2 * 2048) / 16384, 4);
    }
    // ThunderAgent admitted the session as a program: requests went through it.
    expect(
      (s.configs.dynamo_thunder as Config).extra.dynamo?.thunder_programs,
    ).toBeGreaterThanOrEqual(1);
    expect((s.configs.dynamo_kv as Config).extra.dynamo?.thunder_programs).toBeNull();
  });
});
