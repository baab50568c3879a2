// Crash consistency of `kvctl patch apply` and `revert`: the real CLI is killed with SIGKILL (by the
// fault hook in src/patch/fault.ts) just before each of its filesystem mutations in turn, every one
// of them; the next apply, revert or status must then leave the tree byte-identical to pristine or
// to fully patched, with no temp file, journal or lock left behind.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applySeries, revertSeries, seriesStatus } from "../src/patch/index.js";
import { stepCount } from "../src/patch/fault.js";
import { repoRoot } from "./helpers/python.js";
import {
  fixtureSeries,
  hasInstalledSglang,
  makeSitePackages,
  removeTempDirs,
} from "./fixtures/patch-series/trees.js";

const STATE = "sglang/.kvctl-patches.json";
const LEFTOVER = /kvctl-tmp-|\.kvctl-patches\.(journal|lock)$/;
const opts = { series: fixtureSeries };

/** Every file (sha256 and mode) and directory under `dir`; the state file without its timestamp. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const n of readdirSync(d).sort()) {
      const p = join(d, n);
      const rel = relative(dir, p);
      const st = statSync(p);
      if (st.isDirectory()) {
        out[`${rel}/`] = "dir";
        walk(p);
        continue;
      }
      let bytes = readFileSync(p);
      if (rel === STATE) {
        const s = JSON.parse(bytes.toString("utf8"));
        delete s.appliedAt;
        bytes = Buffer.from(JSON.stringify(s));
      }
      out[rel] =
        `${createHash("sha256").update(bytes).digest("hex")}:${(st.mode & 0o7777).toString(8)}`;
    }
  };
  walk(dir);
  return out;
}

const leftovers = (snap: Record<string, string>) =>
  Object.keys(snap).filter((p) => LEFTOVER.test(p));

// The CLI bundled once (as dist/ would be), so that a hundred killed runs start in a blink each.
const bundleDir = join(repoRoot, "node_modules", ".cache", `kvctl-patch-crash-${process.pid}`);
const cliBundle = join(bundleDir, "cli.mjs");

beforeAll(async () => {
  mkdirSync(bundleDir, { recursive: true });
  await build({
    entryPoints: [join(repoRoot, "src", "cli", "bin.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    outfile: cliBundle,
    logLevel: "error",
  });
});

afterAll(() => {
  rmSync(bundleDir, { recursive: true, force: true });
  removeTempDirs();
});

function killedRun(args: string[], killAt: number) {
  return spawnSync(process.execPath, [cliBundle, "patch", ...args], {
    cwd: repoRoot,
    encoding: "utf8",
    env: { ...process.env, KVCTL_PATCH_KILL_AT: String(killAt) },
    timeout: 60_000,
  });
}

function countSteps(fn: () => unknown): number {
  const before = stepCount();
  fn();
  return stepCount() - before;
}

type Recovery = "status" | "apply" | "revert";
const RECOVERIES: Recovery[] = ["status", "apply", "revert"];

function recover(tree: string, how: Recovery): string | null {
  if (how === "status") return seriesStatus(tree, { ...opts, python: false }).recovered;
  if (how === "apply") return applySeries(tree, opts).recovered;
  return revertSeries(tree).recovered;
}

describe.skipIf(!hasInstalledSglang)("kvctl patch under kill -9", () => {
  it("apply and revert killed before each of their writes recover to pristine or fully patched, leaving nothing behind", () => {
    const pristineTree = makeSitePackages();
    const pristine = snapshot(pristineTree);
    const applySteps = countSteps(() => applySeries(pristineTree, opts));
    const patched = snapshot(pristineTree);
    const revertSteps = countSteps(() => revertSeries(pristineTree));
    expect(snapshot(pristineTree)).toEqual(pristine);
    expect(patched).not.toEqual(pristine);
    expect(applySteps + revertSteps).toBeGreaterThanOrEqual(50);

    const runs = [
      ...Array.from({ length: applySteps }, (_, i) => ({ op: "apply", at: i + 1 })),
      ...Array.from({ length: revertSteps }, (_, i) => ({ op: "revert", at: i + 1 })),
    ];
    let torn = 0;
    let recovered = 0;
    for (const [k, run] of runs.entries()) {
      const tree = makeSitePackages();
      if (run.op === "revert") applySeries(tree, opts);
      const args =
        run.op === "apply" ? ["apply", tree, "--series", fixtureSeries] : ["revert", tree];
      const r = killedRun(args, run.at);
      const where = `${run.op} killed before write step ${run.at}`;
      expect(r.signal, `${where}: ${r.stderr}`).toBe("SIGKILL");
      const killed = snapshot(tree);
      const cleanBefore =
        JSON.stringify(killed) === JSON.stringify(pristine) ||
        JSON.stringify(killed) === JSON.stringify(patched);
      if (!cleanBefore) torn++;

      const how = RECOVERIES[k % RECOVERIES.length];
      if (recover(tree, how) !== null) recovered++;
      const after = snapshot(tree);
      expect(leftovers(after), `${where}, recovered by ${how}`).toEqual([]);
      if (how === "apply") expect(after, `${where}, recovered by apply`).toEqual(patched);
      else if (how === "revert") expect(after, `${where}, recovered by revert`).toEqual(pristine);
      else expect([pristine, patched], `${where}, recovered by status`).toContainEqual(after);
      // And the tree works on: apply then revert from here end pristine.
      if (how === "status") {
        applySeries(tree, opts);
        expect(snapshot(tree)).toEqual(patched);
        revertSeries(tree);
        expect(snapshot(tree)).toEqual(pristine);
      }
    }
    // Not vacuous: many kills left a half-written tree (or temp files) that recovery had to mend.
    expect(torn).toBeGreaterThan(runs.length / 2);
    expect(recovered).toBeGreaterThan(runs.length / 2);

    // The CLI says what it recovered.
    const tree = makeSitePackages();
    expect(
      killedRun(["apply", tree, "--series", fixtureSeries], Math.floor(applySteps / 2)).signal,
    ).toBe("SIGKILL");
    const st = spawnSync(
      process.execPath,
      [cliBundle, "patch", "status", tree, "--series", fixtureSeries, "--json", "--no-python"],
      {
        cwd: repoRoot,
        encoding: "utf8",
      },
    );
    expect(JSON.parse(st.stdout).recovered).toMatch(
      /^recovered an interrupted apply \(pid \d+, .*\): rolled it back/,
    );
    expect(snapshot(tree)).toEqual(pristine);
  }, 300_000);
});
