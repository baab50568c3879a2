// `kvctl bench copy` on the CPU twin: figures for both directions and patterns, the baseline, a
// verified session round trip, and --json's last line.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";
import { benchCopy, parseModelDims } from "../src/cli/commands/bench.js";

describe("kvctl bench copy (CPU twin)", () => {
  it("measures contiguous and scattered pages against memcpy and verifies the session", async () => {
    const r = await benchCopy({
      backend: "cpu",
      model: parseModelDims("tiny"),
      tokens: 1000,
      pageSize: 16,
      layout: "page_first",
      deviceLayout: "layer_first",
      iters: 1,
    });
    expect(r.backend).toBe("cpu");
    expect(r.note).toMatch(/CPU twin/);
    expect(r.pages).toBe(63);
    for (const dir of ["d2h", "h2d"] as const) {
      for (const k of ["contiguous", "scattered", "baseline"] as const)
        expect(r.gbps[dir][k]).toBeGreaterThan(0);
    }
    expect(r.session.verified).toBe(true);
    expect(r.plan.granularity).toBe("token");
  });

  it("parses model dims (presets and key=value) and rejects bad ones", () => {
    expect(parseModelDims("layers=4,heads=2,headDim=64,dtype=fp8,kv=1")).toMatchObject({
      layers: 4,
      heads: 2,
      headDim: 64,
      dtype: "fp8",
      kv: 1,
    });
    expect(parseModelDims("llama-3.1-8b")).toMatchObject({ layers: 32, heads: 8, headDim: 128 });
    expect(() => parseModelDims("layers=0,heads=1,headDim=1")).toThrow(/positive integer/);
    expect(() => parseModelDims("layers=2")).toThrow(/heads= is required/);
  });

  it("the CLI's --json last line is one JSON object of the figures", () => {
    const r = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        join(packageRoot, "bench/copy.ts"),
        "--backend",
        "cpu",
        "--model-dims",
        "tiny",
        "--tokens",
        "512",
        "--iters",
        "1",
        "--json",
      ],
      { cwd: packageRoot, encoding: "utf8", timeout: 60_000 },
    );
    expect(r.status).toBe(0);
    const lines = r.stdout.trim().split("\n");
    const j = JSON.parse(lines[lines.length - 1]);
    expect(j).toMatchObject({ backend: "cpu", tokens: 512, session: { verified: true } });
    expect(r.stdout).toMatch(/CPU twin/);
    const bad = spawnSync(
      process.execPath,
      ["--import", "tsx", join(packageRoot, "bench/copy.ts"), "--layout", "nope"],
      { cwd: packageRoot, encoding: "utf8" },
    );
    expect(bad.status).toBe(2);
  });
});
