// The cross-check's fleet half: kvctl sim's `dynamo_kv` configuration (Dynamo's KV-router cost
// function and load terms over SGLang's own cache) against NVIDIA Dynamo 1.6.1's own offline
// replay (its KV router in process, its SGLang-shaped mocker), 4 workers on the same Mooncake-shaped
// trace of independent requests (no sessions, no commands), both timed by the same AIConfigurator
// profile. TTFT p50 and p90 over every request agree within 20% and the tokens recomputed within
// 15% (docs/sim.md, "Cross-check against Dynamo's offline replay", has the larger fleets and says
// where the differences come from). The worker half is python/tests/test_sim_crosscheck.py.
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";

const PY = join(packageRoot, ".venv", "bin", "python");
const PROFILE = "h100_sxm/llama-3.1-70b";

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      { cwd: packageRoot, timeout: 400_000, maxBuffer: 64 << 20 },
      (e, out, err) =>
        e
          ? reject(new Error(`${cmd} ${args.join(" ")}: ${e.message}\n${err.slice(-3000)}`))
          : resolve(out),
    );
  });
}

const lastJson = (out: string) => JSON.parse(out.trim().split("\n").at(-1) as string);

describe("kvctl sim against Dynamo's offline replay, a fleet behind a KV router", () => {
  it("TTFT p50/p90 within 20% and recomputed tokens within 15%", { timeout: 600_000 }, async () => {
    const trace = join(mkdtempSync(join(tmpdir(), "kvctl-xcheck-")), "t.jsonl");
    await run(PY, [
      "python/kvctl_sim/crosscheck_trace.py",
      ...["--out", trace, "--conversations", "128", "--rate", "16", "--seed", "5"],
    ]);
    const [dynamo, sim] = await Promise.all([
      run(PY, [
        "python/kvctl_sim/dynamo_replay.py",
        ...["--trace", trace, "--profile", PROFILE, "--workers", "4", "--seeds", "3"],
        ...["--trace-block-size", "64"],
      ]).then(lastJson),
      run(process.execPath, [
        ...[
          "--import",
          "tsx",
          "src/cli/bin.ts",
          "sim",
          "--trace",
          trace,
          "--trace-block-size",
          "64",
        ],
        ...["--workers", "4", "--profile", PROFILE, "--configs", "dynamo_kv", "--host-tokens", "0"],
        ...["--per-worker", "1000", "--json"],
      ]).then(lastJson),
    ]);
    const ours = sim.configs.dynamo_kv;
    const recomputed = dynamo.runs.map((r: { recomputed_tokens: number }) => r.recomputed_tokens);
    const theirs = recomputed.sort((a: number, b: number) => a - b)[1];
    const figures = {
      p50: [ours.ttft_all.p50_ms, dynamo.ttft_p50_ms],
      p90: [ours.ttft_all.p90_ms, dynamo.ttft_p90_ms],
      recomputed: [ours.recomputed_tokens, theirs],
    };
    expect(ours.ttft_all.n, JSON.stringify(figures)).toBe(dynamo.runs[0].completed);
    for (const [name, [a, b], bar] of [
      ["p50", figures.p50, 0.2],
      ["p90", figures.p90, 0.2],
      ["recomputed", figures.recomputed, 0.15],
    ] as const) {
      expect(b, name).toBeGreaterThan(0);
      expect(Math.abs(a / b - 1), `${name}: ${JSON.stringify(figures)}`).toBeLessThanOrEqual(bar);
    }
  });
});
