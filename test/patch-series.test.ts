// The repo's own series (patches/sglang-0.5.23/, written with the worker code) against the pinned
// SGLang: it must apply cleanly, place python/ sources in sync, and revert byte for byte. Skipped
// until the series exists. Also: recovery from an interrupted apply, malformed patches, permissions.
import { spawnSync } from "node:child_process";
import { chmodSync, cpSync, mkdirSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { buildSync } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";
import {
  applySeries,
  checkSeries,
  loadSeries,
  placedDrift,
  revertSeries,
} from "../src/patch/index.js";
import { repoRoot } from "./helpers/python.js";
import {
  cli,
  copySglang,
  fingerprint,
  fixtureSeries,
  hasInstalledSglang,
  installedSglang,
  makeSitePackages,
  tempDir,
  removeTempDirs,
} from "./fixtures/patch-series/trees.js";

afterAll(removeTempDirs);

const repoSeries = join(repoRoot, "patches", "sglang-0.5.23");
const hasRepoSeries = existsSync(join(repoSeries, "series"));

describe.skipIf(!hasInstalledSglang || !hasRepoSeries)(
  "the repo's series patches/sglang-0.5.23",
  () => {
    it("applies to the pinned SGLang, places python/ in sync, and reverts byte for byte", () => {
      const series = loadSeries(repoSeries, repoRoot);
      const touched = new Set<string>(["__init__.py", "_version.py"]);
      for (const p of series.patches) {
        for (const f of p.parsed.files)
          if (f.kind !== "create") touched.add(f.path.replace(/^sglang\//, ""));
      }
      for (const f of touched)
        expect(
          existsSync(join(installedSglang, f)),
          `the series patches sglang/${f}, which SGLang 0.5.23 lacks`,
        ).toBe(true);
      const tree = copySglang(tempDir(), [...touched]);
      const before = fingerprint(tree);
      const check = checkSeries(tree);
      expect(check.ok, check.messages.join("\n")).toBe(true);
      const r = applySeries(tree);
      expect(r.ok, r.messages.join("\n")).toBe(true);
      expect(placedDrift(tree)).toEqual([]);
      revertSeries(tree);
      expect(fingerprint(tree)).toEqual(before);
    });
  },
);

// As root, the permission check runs the CLI as nobody, who may not be able to read the checkout
// (a clone under a 0700 temp dir): the CLI goes as a bundle, with a package.json naming kvctl (its
// package root) and a copy of the fixture series at the same relative place, into a folder nobody
// can read.
// As root, permission bits do not stop writes: run the CLI as 'nobody' through setpriv instead.
const isRoot = process.getuid?.() === 0;
const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
let nobodyDir: string | null = null;
function nobodyReadable(src?: string): string {
  if (!nobodyDir) {
    nobodyDir = tempDir("kvctl-patch-nobody-");
    chmodSync(nobodyDir, 0o755);
    writeFileSync(
      join(nobodyDir, "package.json"),
      JSON.stringify({ name: "kvctl", version: "0.0.0", type: "module" }),
    );
    buildSync({
      entryPoints: [join(repoRoot, "src", "cli", "bin.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      // one chunk per subcommand, as the CLI loads them: `patch` never reaches the native parts
      splitting: true,
      external: ["*.node", "zeromq", "node-gyp-build"],
      banner: {
        js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
      },
      outExtension: { ".js": ".mjs" },
      outdir: nobodyDir,
      logLevel: "error",
    });
  }
  if (!src) return join(nobodyDir, "bin.mjs");
  const fixtures = join(repoRoot, "test", "fixtures", "patch-series");
  const copy = join(nobodyDir, "test", "fixtures", "patch-series");
  if (!existsSync(copy)) cpSync(fixtures, copy, { recursive: true });
  return join(copy, relative(fixtures, src));
}

function asNobody(args: string[]): { status: number | null; stderr: string } {
  const x = spawnSync(
    setpriv as string,
    [
      "--reuid=65534",
      "--regid=65534",
      "--clear-groups",
      process.execPath,
      nobodyReadable(),
      "patch",
      ...args,
    ],
    {
      cwd: nobodyDir as string,
      encoding: "utf8",
    },
  );
  return { status: x.status, stderr: x.stderr };
}

describe.skipIf(!hasInstalledSglang)("patch kit failure modes", () => {
  it("an apply killed midway (state left at 'applying') is refused by apply and undone by revert", () => {
    const tree = makeSitePackages();
    const pristine = fingerprint(tree);
    applySeries(tree, { series: fixtureSeries });
    // Simulate the kill: state still 'applying', one file not yet written (still original).
    const sp = join(tree, "sglang/.kvctl-patches.json");
    const state = JSON.parse(readFileSync(sp, "utf8"));
    state.status = "applying";
    writeFileSync(sp, JSON.stringify(state));
    cpSync(
      join(installedSglang, "srt/mem_cache/flush_cache.py"),
      join(tree, "sglang/srt/mem_cache/flush_cache.py"),
    );
    const a = cli(["apply", tree, "--series", fixtureSeries]);
    expect(a.status).toBe(1);
    expect(a.stderr).toMatch(/was interrupted.*run 'kvctl patch revert/);
    const c = cli(["check", tree, "--series", fixtureSeries]);
    expect(c.status).toBe(1);
    expect(c.stdout).toMatch(/INTERRUPTED/);
    const r = cli(["revert", tree]);
    expect(r.status, r.stderr).toBe(0);
    expect(fingerprint(tree)).toEqual(pristine);
  });

  it("a malformed patch is reported with its file and line, before anything is touched", () => {
    const tree = makeSitePackages();
    const series = join(tempDir("kvctl-series-"), "sglang-0.5.23");
    cpSync(fixtureSeries, series, { recursive: true });
    const p2 = join(series, "0002-pin-aware-flush.patch");
    writeFileSync(p2, readFileSync(p2, "utf8").replace(" Usage:\n", "Usage:\n"));
    const before = fingerprint(tree);
    const r = cli(["apply", tree, "--series", series, "--json"]);
    expect(r.status).toBe(1);
    expect(r.json.error.code).toBe("malformed");
    expect(r.json.error.message).toMatch(
      /^0002-pin-aware-flush\.patch:9: hunk @@ -18,6 \+18,8 @@ ends early/,
    );
    // A series naming a missing patch.
    writeFileSync(join(series, "series"), "0001-pin-aware-evict.patch\n0009-missing.patch\n");
    const r2 = cli(["check", tree, "--series", series]);
    expect(r2.status).toBe(1);
    expect(r2.stderr).toMatch(
      /series:2: patch '0009-missing\.patch' is listed but .* does not exist/,
    );
    expect(fingerprint(tree)).toEqual(before);
  });

  it("a placed file that would overwrite SGLang's own file is a conflict", () => {
    const tree = makeSitePackages();
    const dir = join(tree, "sglang/srt/kvctl_fixture");
    mkdirSync(dir);
    writeFileSync(join(dir, "hooks.py"), "# SGLang's own\n");
    const before = fingerprint(tree);
    const r = applySeries(tree, { series: fixtureSeries });
    expect(r.ok).toBe(false);
    expect(r.placedConflicts).toEqual([
      "sglang/srt/kvctl_fixture/hooks.py (from test/fixtures/patch-series/python/kvctl_fixture/hooks.py) would overwrite a file that exists in the SGLang tree",
    ]);
    expect(fingerprint(tree)).toEqual(before);
  });

  it.skipIf(isRoot && !setpriv)("permission denied is reported before anything is written", () => {
    const tree = makeSitePackages();
    chmodSync(tree, 0o755);
    const sg = join(tree, "sglang");
    const mc = join(tree, "sglang/srt/mem_cache");
    // The package dir is writable (lock, state), the patched files' directory is not.
    chmodSync(sg, 0o777);
    chmodSync(mc, 0o555);
    const before = fingerprint(tree);
    try {
      const r = isRoot
        ? asNobody(["apply", tree, "--series", nobodyReadable(fixtureSeries)])
        : cli(["apply", tree, "--series", fixtureSeries]);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/permission denied: cannot write into .*mem_cache \(EACCES\)/);
    } finally {
      chmodSync(mc, 0o755);
      chmodSync(sg, 0o755);
    }
    expect(fingerprint(tree)).toEqual(before);
  });
});
