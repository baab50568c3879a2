// scripts/gpu-check.sh --dry-run on this host (nvcc, no GPU): the GPU check builds, with nvcc and
// cmake alone, every test case its sources declare and the copy bench, and prints its summary.
// The launch itself runs only on a GPU host (`bash scripts/gpu-check.sh` there).
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";

const nvcc = [
  process.env.CUDACXX,
  "/usr/local/cuda/bin/nvcc",
  ...(process.env.PATH ?? "").split(":").map((d) => join(d, "nvcc")),
].find((p) => p && existsSync(p));

describe("scripts/gpu-check.sh --dry-run", () => {
  it.skipIf(!nvcc)(
    "builds the kernels' tests and bench without Node's packages and lists every case",
    async () => {
      const dir = join(packageRoot, "native/gpu_check");
      const declared = readdirSync(dir)
        .filter((f) => f.endsWith(".cpp"))
        .flatMap((f) => readFileSync(join(dir, f), "utf8").match(/^TEST_CASE\(/gm) ?? []).length;
      expect(declared).toBeGreaterThanOrEqual(7);
      const { code, stdout, stderr } = await new Promise<{
        code: number;
        stdout: string;
        stderr: string;
      }>((resolve) => {
        execFile(
          "bash",
          [join(packageRoot, "scripts/gpu-check.sh"), "--dry-run"],
          { cwd: packageRoot, timeout: 420_000, maxBuffer: 64 << 20 },
          (err, stdout, stderr) =>
            resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
        );
      });
      if (code !== 0) console.error(stderr);
      expect(code).toBe(0);
      const summary = JSON.parse(stdout.trim().split("\n").at(-1) ?? "");
      expect(summary).toMatchObject({
        dry_run: true,
        gpu: null,
        tests: { passed: 0, failed: 0, built: declared },
        copy_ratio_vs_memcpy: null,
      });
      expect(summary.sanitizer).toMatch(/^(absent|not run \(dry run\))$/);
      expect(existsSync(join(packageRoot, "build-gpu-check/kvcuda_bench"))).toBe(true);
    },
  );
});
