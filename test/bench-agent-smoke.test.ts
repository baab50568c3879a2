// `npm run bench:agent -- --json --smoke`: two BFCL sessions through the kvctl configuration (its
// gateway, agent policy and NATS commands) on real patched SGLang servers on CPU. The bench reports
// a configuration that failed as not run instead of exiting non-zero, so the test asserts that it
// ran, served every request and sent commands.
import { describe, expect, it } from "vitest";
import { runBenchSmoke } from "./helpers/bench-smoke.js";

describe("npm run bench:agent -- --json --smoke", () => {
  it("runs the kvctl configuration end to end", { timeout: 900_000 }, async () => {
    const r = await runBenchSmoke("agent", 880_000);
    expect(r.code, r.tail).toBe(0);
    type Config = { requests: number; errors: number; prompt_tokens: number; flood_served: string; commands: Record<string, number> | null };
    const j = r.json as { bench: string; runs: number; not_run: Record<string, string>; configs: Record<string, Config | null> };
    expect(j, r.tail).not.toBeNull();
    expect(j.bench).toBe("agent");
    expect(j.not_run).toEqual({});
    for (const name of ["kvctl"]) {
      const c = j.configs[name];
      expect(c, name).not.toBeNull();
      expect(c?.requests, name).toBeGreaterThan(0);
      expect(c?.errors, name).toBe(0);
      expect(c?.prompt_tokens, name).toBeGreaterThan(0);
      expect(c?.flood_served, name).toBe("2/2");
    }
    // The policy sent commands and the workers applied them ("Cache:acked:applied" and the like).
    const commands = j.configs.kvctl?.commands ?? {};
    const applied = Object.entries(commands).filter(([k]) => k.endsWith(":acked:applied"));
    expect(applied.reduce((n, [, v]) => n + v, 0), JSON.stringify(commands)).toBeGreaterThan(0);
  });
});
