// Every `npm run bench:*` still runs: each in its --smoke size (the same code on a tiny input)
// exits 0 and prints its JSON last line with the fields its docs name. The figures of a smoke run
// are not results (no bar on them); what is checked is that they were produced, and where a bench
// computes behaviour rather than speed (pins surviving a flood, a verified copy session) that too.
// bench:agent, the slow one, is test/bench-agent-smoke.test.ts.
import { describe, expect, it } from "vitest";
import { runBenchSmoke } from "./helpers/bench-smoke.js";

const positive = (j: Record<string, unknown>, keys: string[]) => {
  for (const k of keys) expect(j[k], k).toBeGreaterThan(0);
};

async function bench(
  name: string,
  timeoutMs: number,
  extraArgs: string[] = [],
): Promise<Record<string, unknown>> {
  const r = await runBenchSmoke(name, timeoutMs, extraArgs);
  expect(r.code, r.tail).toBe(0);
  expect(r.json, r.tail).not.toBeNull();
  return r.json as Record<string, unknown>;
}

describe("npm run bench:* -- --json --smoke", () => {
  it("bench:hash", { timeout: 300_000 }, async () => {
    const j = await bench("hash", 280_000);
    expect(j.bench).toBe("hash");
    positive(j, [
      "addon_tokens_per_s",
      "python_tokens_per_s",
      "node_crypto_tokens_per_s",
      "openssl_tokens_per_s",
      "ratio_vs_python",
      "ratio_vs_node_crypto",
      "ratio_vs_openssl",
    ]);
  });

  it("bench:control", { timeout: 180_000 }, async () => {
    const j = await bench("control", 170_000);
    expect(j.bench).toBe("control");
    positive(j, [
      "raw_p50_us",
      "raw_p99_us",
      "cmd_p50_us",
      "cmd_p99_us",
      "p50_ratio",
      "acked_per_s_c64",
    ]);
  });

  it("bench:index", { timeout: 180_000 }, async () => {
    const j = await bench("index", 170_000);
    expect(j.bench).toBe("index");
    positive(j, [
      "apply_ops_per_s",
      "events_per_s",
      "verified_events_per_s",
      "verified_batched_events_per_s",
      "sha_bound_blocks_per_s",
      "score_p50_us",
      "score_p99_us",
      "bytes_per_block",
      "ts_index_events_per_s",
      "map_baseline_events_per_s",
    ]);
    expect(j.int_run_path).toMatch(/^(avx512|avx2|scalar)$/);
  });

  it("bench:pin: pins survive the flood, unpinned context does not", {
    timeout: 300_000,
  }, async () => {
    const j = await bench("pin", 280_000);
    expect(j.bench).toBe("pin");
    const depths = j.depths as number[];
    expect(depths.length).toBeGreaterThanOrEqual(2);
    for (const k of ["baseline_cached", "pinned_cached", "tier_pinned_cached"])
      expect((j[k] as number[]).length, k).toBe(depths.length);
    for (const x of j.baseline_cached as number[]) expect(x).toBeLessThanOrEqual(0.05);
    for (const x of [...(j.pinned_cached as number[]), ...(j.tier_pinned_cached as number[])])
      expect(x).toBeGreaterThanOrEqual(0.9);
  });

  it("bench:pin --server: real servers on SGLang's Rust tree core, pins survive the flood", {
    timeout: 600_000,
  }, async () => {
    const j = await bench("pin", 590_000, ["--server"]);
    expect(j.bench).toBe("pin-server");
    expect(j.tree_core).toEqual(["rust", "rust"]);
    const depths = j.depths as number[];
    expect(depths.length).toBeGreaterThanOrEqual(2);
    for (const x of [...(j.baseline_cached as number[]), ...(j.tier_baseline_cached as number[])])
      expect(x).toBeLessThanOrEqual(0.05);
    for (const x of [...(j.pinned_cached as number[]), ...(j.tier_pinned_cached as number[])])
      expect(x).toBeGreaterThanOrEqual(0.9);
    expect(j.ok).toBe(true);
  });

  it("bench:copy: figures for both directions and a verified session", {
    timeout: 180_000,
  }, async () => {
    const j = await bench("copy", 170_000);
    expect(j.backend).toMatch(/^(cpu|cuda)$/);
    const gbps = j.gbps as Record<string, Record<string, number>>;
    for (const dir of ["d2h", "h2d"])
      for (const k of ["contiguous", "scattered", "baseline"])
        expect(gbps[dir][k], `${dir}.${k}`).toBeGreaterThan(0);
    expect(j.session).toMatchObject({ verified: true });
  });

  it("bench:gateway", { timeout: 180_000 }, async () => {
    const j = await bench("gateway", 170_000);
    expect(j.bench).toBe("gateway");
    for (const k of ["added_p50_ms", "added_p99_ms", "chunk_added_p50_ms", "chunk_added_p99_ms"])
      expect(Number.isFinite(j[k]), k).toBe(true);
    positive(j, ["req_per_s_c64", "direct_req_per_s_c64", "ratio_c64"]);
  });

  it("bench:worker: every configuration ran on the core it must", {
    timeout: 600_000,
  }, async () => {
    const j = await bench("worker", 590_000);
    expect(j.bench).toBe("worker");
    const us = j.us_per_req as Record<string, number>;
    expect(Object.keys(us).sort()).toEqual([
      "patched_off",
      "patched_on",
      "patched_on_rust",
      "pristine_python",
      "pristine_rust",
    ]);
    for (const v of Object.values(us)) expect(v).toBeGreaterThan(0);
    positive(j, ["off_ratio", "on_ratio_vs_python", "on_rust_ratio", "on_ratio_vs_rust"]);
  });
});
