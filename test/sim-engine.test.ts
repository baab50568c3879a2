// kvctl sim end to end, through its CLI: the same seed gives byte-identical JSON (wall time, the
// one figure that is not simulated, left out of the compared bytes), whatever number of
// configurations run at once; every configuration and the oracle report their figures, and none
// recomputes less than the oracle; bad input is refused naming the field, before anything runs.
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function kvctlSim(args: string[], timeoutMs = 400_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", "src/cli/bin.ts", "sim", ...args],
      { cwd: packageRoot, timeout: timeoutMs, maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const SMALL = ["--programs", "3", "--workers", "2", "--context", "4096", "--seed", "7", "--json"];

/** The last line's JSON without wall time (the only field real time writes). */
function simulated(r: Run): string {
  expect(r.code, r.stderr.slice(-3000)).toBe(0);
  const j = JSON.parse(r.stdout.trim().split("\n").at(-1) as string);
  expect(j.wall_s).toBeGreaterThan(0);
  delete j.wall_s;
  return JSON.stringify(j);
}

describe("kvctl sim", () => {
  it("the same seed gives byte-identical JSON, with every configuration above the oracle", {
    timeout: 600_000,
  }, async () => {
    const [a, b] = await Promise.all([
      kvctlSim([...SMALL, "--parallel", "2"]),
      kvctlSim([...SMALL, "--parallel", "1"]),
    ]);
    const ja = simulated(a);
    expect(simulated(b)).toBe(ja);
    const j = JSON.parse(ja);
    expect(Object.keys(j.configs)).toEqual([
      "kvctl",
      "session_radix",
      "thunder",
      "cache_aware",
      "lru",
      "dynamo_kv",
    ]);
    expect(j.requests).toBeGreaterThan(3);
    expect(j.oracle.recomputed_tokens).toBeGreaterThan(0);
    for (const [name, c] of Object.entries(j.configs) as [string, Record<string, number>][]) {
      expect(c.errors, name).toBe(0);
      expect(c.recomputed_tokens, name).toBeGreaterThanOrEqual(j.oracle.recomputed_tokens);
      expect(c.ttft_p50_ms, name).toBeGreaterThan(0);
    }
    // Round robin over two workers loses returning turns' prefixes that KV-aware routing keeps.
    expect(j.configs.lru.recomputed_tokens).toBeGreaterThan(
      j.configs.cache_aware.recomputed_tokens,
    );
    // kvctl's agent policy sent commands and the simulated workers acked them.
    const kv = j.configs.kvctl.commands as Record<string, { sent: number }>;
    expect(Object.values(kv).reduce((n, c) => n + c.sent, 0)).toBeGreaterThan(0);
  });

  it("with HiCache's L3 shared by the fleet: prefixes come back from storage, deterministically", {
    timeout: 600_000,
  }, async () => {
    // Round robin moves every program between the two workers: a returning turn finds on its
    // worker only part of its prefix, and the rest in the store the other worker wrote.
    const base = ["--programs", "6", "--workers", "2", "--context", "8192", "--seed", "7"];
    const args = [...base, "--json", "--configs", "lru", "--device-tokens", "8704"];
    const [a, b, off] = await Promise.all([
      kvctlSim([...args, "--host-tokens", "8704", "--storage", "shared"]),
      kvctlSim([...args, "--host-tokens", "8704", "--storage", "shared"]),
      kvctlSim([...args, "--host-tokens", "8704"]),
    ]);
    const ja = simulated(a);
    expect(simulated(b)).toBe(ja);
    const l3 = JSON.parse(ja).configs.lru;
    const none = JSON.parse(simulated(off)).configs.lru;
    expect(l3.errors).toBe(0);
    expect(l3.storage_hit_tokens).toBeGreaterThan(0);
    expect(l3.bytes_moved.storage_read).toBeGreaterThan(0);
    expect(l3.bytes_moved.storage_write).toBeGreaterThan(0);
    expect(none.storage_hit_tokens).toBe(0);
    expect(none.bytes_moved.storage_read).toBe(0);
    expect(l3.recomputed_tokens).toBeLessThan(none.recomputed_tokens);
  });

  it("refuses bad input naming the field, before anything runs", { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "kvctl-sim-test-"));
    const trace = join(dir, "bad.jsonl");
    const row = {
      session_id: "a",
      timestamp: 0,
      input_length: "x",
      output_length: 4,
      hash_ids: [1],
    };
    writeFileSync(trace, `${JSON.stringify(row)}\n`);
    const [profile, fit, bad, config, l3] = await Promise.all([
      kvctlSim(["--profile", "h100_sxm/nope", "--programs", "1"]),
      kvctlSim(["--programs", "2", "--context", "8192", "--device-tokens", "2048"]),
      kvctlSim(["--trace", trace, "--trace-block-size", "16"]),
      kvctlSim(["--programs", "1", "--configs", "lru,belady"]),
      kvctlSim(["--programs", "1", "--storage", "worker", "--host-tokens", "0"]),
    ]);
    expect(profile.code).toBe(2);
    expect(profile.stderr).toMatch(/unknown model .*h100_sxm has llama-3\.1-70b, llama-3\.1-8b/);
    expect(fit.code).toBe(2);
    expect(fit.stderr).toMatch(/do not fit a worker's device pool of 2048 tokens/);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/trace line 1: input_length: expected an integer/);
    expect(config.code).toBe(2);
    expect(config.stderr).toMatch(/unknown configuration "belady"; known: kvctl, session_radix/);
    expect(l3.code).toBe(2);
    expect(l3.stderr).toMatch(/--storage worker: an L3 needs HiCache's host tier/);
  });

  it("bad numbers are refused naming the flag", { timeout: 60_000 }, async () => {
    const r = await kvctlSim(["--workers", "0"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--workers: expected an integer >= 1, got "0"/);
    const s = await kvctlSim(["--storage", "disk"]);
    expect(s.code).toBe(2);
    expect(s.stderr).toMatch(/--storage: "disk" is not one of none, worker, shared/);
  });
});
