// The patch kit end to end on selective copies of the installed SGLang 0.5.23: apply, status,
// revert (byte exact), idempotence, atomicity, version refusal, conflicts, hand edits, layouts.
import { spawnSync } from "node:child_process";
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  applySeries,
  locateSglang,
  revertSeries,
  seriesStatus,
  placedDrift,
  PatchError,
} from "../src/patch/index.js";
import { hasVenv, venvPython } from "./helpers/python.js";
import {
  cli,
  copySglang,
  fingerprint,
  fixtureRoot,
  fixtureSeries,
  hasInstalledSglang,
  makeSitePackages,
  tempDir,
  removeTempDirs,
} from "./fixtures/patch-series/trees.js";

afterAll(removeTempDirs);

const d = hasInstalledSglang ? describe : describe.skip;
const S = ["--series", fixtureSeries];
const opts = { series: fixtureSeries };
const EVICT = "sglang/srt/mem_cache/evict_policy.py";

function expectThrows(fn: () => unknown, code: string, re: RegExp): void {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(PatchError);
    expect((err as PatchError).code).toBe(code);
    expect((err as Error).message).toMatch(re);
    return;
  }
  throw new Error("expected a PatchError");
}

/** A copy of the fixture series in a temp dir (sglang-0.5.23/), to break on purpose. */
function seriesCopy(): string {
  const dir = join(tempDir("kvctl-series-"), "sglang-0.5.23");
  cpSync(fixtureSeries, dir, { recursive: true });
  return dir;
}

d("kvctl patch on a site-packages copy", () => {
  it("apply -> status -> revert through the CLI restores every byte and removes placed files and state", () => {
    const tree = makeSitePackages();
    const before = fingerprint(tree);
    const check = cli(["check", tree, ...S, "--json"]);
    expect(check.status).toBe(0);
    expect(check.json.patches.map((p: any) => p.status)).toEqual([
      "would-apply",
      "would-apply",
      "would-apply",
    ]);

    const a = cli(["apply", tree, ...S]);
    expect(a.status, a.stderr).toBe(0);
    expect(a.stdout).toContain("applied 0001-pin-aware-evict.patch (1 file, 2 hunks)");
    expect(a.stdout).toContain("applied 0002-pin-aware-flush.patch (2 files, 3 hunks)");
    expect(a.stdout).toContain("applied 0003-note-file.patch (2 files, 2 hunks)");
    expect(a.stdout).toMatch(/placed 4 files/);
    expect(readFileSync(join(tree, EVICT), "utf8")).toContain("class PinAwareLRUStrategy");
    expect(existsSync(join(tree, "sglang/srt/kvctl_fixture/sub/util.py"))).toBe(true);
    // tests/ and test_*.py are not placed.
    expect(existsSync(join(tree, "sglang/srt/kvctl_fixture/tests"))).toBe(false);
    expect(existsSync(join(tree, "sglang/srt/kvctl_fixture/test_skipped.py"))).toBe(false);

    const state = JSON.parse(readFileSync(join(tree, "sglang/.kvctl-patches.json"), "utf8"));
    expect(state).toMatchObject({
      format: 1,
      tool: "kvctl",
      status: "applied",
      series: "sglang-0.5.23",
      sglangVersion: "0.5.23",
    });
    expect(state.patches).toHaveLength(3);
    const evict = state.files.find((f: any) => f.path === EVICT);
    expect(evict.patches).toEqual(["0001-pin-aware-evict.patch", "0003-note-file.patch"]);
    expect(evict.originalSha256).toBe(before[EVICT].split(":")[0]);
    expect(state.placed.map((p: any) => p.path)).toEqual([
      "sglang/srt/kvctl_fixture/__init__.py",
      "sglang/srt/kvctl_fixture/hooks.py",
      "sglang/srt/kvctl_fixture/sub/__init__.py",
      "sglang/srt/kvctl_fixture/sub/util.py",
    ]);

    const st = cli(["status", tree, ...S, "--json", "--no-python"]);
    expect(st.status).toBe(0);
    expect(st.json.clean).toBe(true);
    expect(st.json.patches.every((p: any) => p.state === "applied")).toBe(true);
    expect(st.json.placed.every((p: any) => p.state === "ok")).toBe(true);

    const c2 = cli(["check", tree, ...S, "--json"]);
    expect(c2.status).toBe(0);
    expect(c2.json.patches.map((p: any) => p.status)).toEqual(["applied", "applied", "applied"]);

    const r = cli(["revert", tree, "--json"]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json.action).toBe("reverted");
    expect(fingerprint(tree)).toEqual(before);
  });

  it("a second apply reports already applied and changes nothing", () => {
    const tree = makeSitePackages();
    expect(applySeries(tree, opts).action).toBe("applied");
    const after = fingerprint(tree);
    const again = cli(["apply", tree, ...S]);
    expect(again.status).toBe(0);
    expect(again.stdout).toMatch(/already applied: series sglang-0.5.23/);
    expect(fingerprint(tree)).toEqual(after);
  });

  it("a conflict in the LAST patch leaves the tree byte-identical", () => {
    const tree = makeSitePackages();
    const series = seriesCopy();
    // 0003 expects a comment line that 0001 does not write.
    const p3 = join(series, "0003-note-file.patch");
    writeFileSync(
      p3,
      readFileSync(p3, "utf8").replace(
        "-    # kvctl: pinned nodes are evicted last.\n",
        "-    # kvctl: pinned nodes go last.\n",
      ),
    );
    const before = fingerprint(tree);
    const r = cli(["apply", tree, "--series", series, "--json"]);
    expect(r.status).toBe(1);
    expect(r.json.action).toBe("conflict");
    expect(r.json.patches.map((p: any) => p.status)).toEqual(["ok", "ok", "conflict"]);
    expect(r.json.patches[2].conflict).toMatchObject({ file: EVICT, hunk: 1, line: 24 });
    expect(fingerprint(tree)).toEqual(before);
  });

  it("a write failure midway (any write, the last included) rolls everything back", () => {
    const tree = makeSitePackages();
    const before = fingerprint(tree);
    // backups(3) + pending state + 8 tree writes + final state = 13 writes.
    for (const n of [1, 2, 4, 7, 12, 13]) {
      expectThrows(
        () => applySeries(tree, { ...opts, failAfterWrites: n }),
        "io",
        /simulated failure.*nothing was changed/,
      );
      expect(fingerprint(tree)).toEqual(before);
    }
    // The CLI says the same.
    const r = cli(["apply", tree, ...S, "--fail-after-writes", "9"]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/rolled back/);
    expect(fingerprint(tree)).toEqual(before);
    // And a failing revert leaves the applied tree as it was.
    applySeries(tree, opts);
    const applied = fingerprint(tree);
    expectThrows(() => revertSeries(tree, { failAfterWrites: 5 }), "io", /rolled back/);
    expect(fingerprint(tree)).toEqual(applied);
  });

  it("refuses a version mismatch before touching a file, naming both versions and the series that exist", () => {
    const tree = makeSitePackages();
    const vfile = join(tree, "sglang/_version.py");
    writeFileSync(vfile, readFileSync(vfile, "utf8").replace(/'0\.5\.23'/, "'0.5.22'"));
    const before = fingerprint(tree);
    for (const sub of ["apply", "check"]) {
      const r = cli([sub, tree, ...S]);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(
        /series .*sglang-0\.5\.23 targets SGLang 0\.5\.23, but SGLang at .* is 0\.5\.22 \(from sglang\/_version\.py\)/,
      );
      expect(r.stderr).toMatch(/series available in .*: sglang-0\.5\.23/);
    }
    // Against a patches/ root: lists what exists there.
    const r = cli(["apply", tree, "--series", fixtureRoot]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(
      /no patch series sglang-0\.5\.22; series available in .*: sglang-0\.5\.23/,
    );
    expect(fingerprint(tree)).toEqual(before);
    // --sglang-version overrides a wrong detection.
    expect(applySeries(tree, { ...opts, sglangVersion: "0.5.23" }).ok).toBe(true);
  });

  it("check reports a conflict with the file, hunk and first mismatching line", () => {
    const tree = makeSitePackages();
    const f = join(tree, EVICT);
    writeFileSync(
      f,
      readFileSync(f, "utf8").replace(
        "        return node.last_access_time\n",
        "        return node.last_access_time  # local change\n",
      ),
    );
    const before = fingerprint(tree);
    const r = cli(["check", tree, ...S, "--json"]);
    expect(r.status).toBe(1);
    const p1 = r.json.patches[0];
    expect(p1.status).toBe("conflict");
    expect(p1.conflict).toMatchObject({ file: EVICT, hunk: 2, line: 18 });
    expect(p1.message).toMatch(
      /hunk #2 @@ -18,6 \+20,12 @@ does not apply: line 18: expected " {8}return node.last_access_time", found ".*# local change"/,
    );
    const text = cli(["check", tree, ...S]);
    expect(text.stdout).toMatch(
      /CONFLICT 0001-pin-aware-evict\.patch: sglang\/srt\/mem_cache\/evict_policy\.py: hunk #2/,
    );
    expect(fingerprint(tree)).toEqual(before);
  });

  it("revert refuses after a hand edit, changing nothing, unless --force", () => {
    const tree = makeSitePackages();
    const pristine = fingerprint(tree);
    applySeries(tree, opts);
    appendFileSync(join(tree, "sglang/srt/mem_cache/flush_cache.py"), "# hand edit\n");
    writeFileSync(join(tree, "sglang/srt/kvctl_fixture/hooks.py"), "# replaced by hand\n");
    const edited = fingerprint(tree);
    const r = cli(["revert", tree]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      /refusing to revert: sglang\/srt\/mem_cache\/flush_cache\.py \(patched file modified since apply\), sglang\/srt\/kvctl_fixture\/hooks\.py \(placed file modified since apply\)/,
    );
    expect(fingerprint(tree)).toEqual(edited);
    // status shows the drift; a re-apply refuses too.
    const st = seriesStatus(tree, { ...opts, python: false });
    expect(st.clean).toBe(false);
    expect(st.files.find((f) => f.path.endsWith("flush_cache.py"))?.state).toBe("modified");
    expect(st.placed.find((p) => p.path.endsWith("hooks.py"))?.state).toBe("modified");
    expectThrows(() => applySeries(tree, opts), "drift", /changed by hand since apply/);
    const forced = cli(["revert", tree, "--force"]);
    expect(forced.status, forced.stderr).toBe(0);
    expect(fingerprint(tree)).toEqual(pristine);
  });

  it.skipIf(!hasVenv)(
    "status names the sglang the interpreter imports, and a real Python imports the placed module through the patched file",
    () => {
      const tree = makeSitePackages();
      // SGLang's own __init__ needs numpy/torch; the venv has no numpy, so stub the package init.
      writeFileSync(join(tree, "sglang/__init__.py"), "");
      applySeries(tree, opts);
      const code = [
        "import sglang.srt.mem_cache.evict_policy as ep",
        "from sglang.srt.kvctl_fixture import FIXTURE_MARKER",
        "class N: last_access_time = 3.0",
        "n = N()",
        "ep._kvctl_hooks.PINNED.add(id(n))",
        "print(ep.__file__); print(ep._kvctl_hooks.__file__); print(FIXTURE_MARKER); print(ep.PinAwareLRUStrategy().get_priority(n))",
      ].join("\n");
      const r = spawnSync(venvPython, ["-c", code], {
        encoding: "utf8",
        env: { ...process.env, PYTHONPATH: tree },
      });
      expect(r.status, r.stderr).toBe(0);
      const [epFile, hooksFile, marker, prio] = r.stdout.trim().split("\n");
      expect(epFile.startsWith(tree)).toBe(true);
      expect(hooksFile).toBe(join(tree, "sglang/srt/kvctl_fixture/hooks.py"));
      expect(marker).toBe("kvctl-fixture");
      expect(prio).toBe("(1, 3.0)");

      const inTree = seriesStatus(tree, {
        ...opts,
        python: venvPython,
        env: { ...process.env, PYTHONPATH: tree },
      });
      expect(inTree.interpreter).toMatchObject({
        ran: true,
        importsThisTree: true,
        sglangDir: join(tree, "sglang"),
      });
      expect(inTree.clean).toBe(true);
      // Without PYTHONPATH the venv imports its own installed copy: the trap-8 warning.
      const other = cli(["status", tree, ...S, "--python", venvPython], { PYTHONPATH: "" });
      expect(other.status).toBe(1);
      expect(other.stdout).toMatch(
        /WARNING: interpreter .* imports ANOTHER sglang: .*site-packages\/sglang/,
      );
      const st = cli(["status", tree, ...S, "--json"], { PYTHONPATH: tree });
      expect(st.json.interpreter.importsThisTree).toBe(true);
      // Revert also removes the directories apply created, with Python's __pycache__ in them.
      revertSeries(tree);
      expect(existsSync(join(tree, "sglang/srt/kvctl_fixture"))).toBe(false);
    },
  );

  it("placed files drift from their sources: detected, and a re-apply brings them up to date", () => {
    const repo = tempDir("kvctl-repo-");
    cpSync(join(fixtureRoot, "python"), join(repo, "test/fixtures/patch-series/python"), {
      recursive: true,
    });
    const tree = makeSitePackages();
    const o = { ...opts, repoRoot: repo };
    applySeries(tree, o);
    expect(placedDrift(tree, o)).toEqual([]);
    appendFileSync(
      join(repo, "test/fixtures/patch-series/python/kvctl_fixture/hooks.py"),
      "\nEXTRA = 1\n",
    );
    writeFileSync(
      join(repo, "test/fixtures/patch-series/python/kvctl_fixture/sub/more.py"),
      "X = 2\n",
    );
    expect(placedDrift(tree, o)).toEqual([
      {
        path: "sglang/srt/kvctl_fixture/hooks.py",
        source: "test/fixtures/patch-series/python/kvctl_fixture/hooks.py",
        state: "outdated",
      },
      {
        path: "sglang/srt/kvctl_fixture/sub/more.py",
        source: "test/fixtures/patch-series/python/kvctl_fixture/sub/more.py",
        state: "not-placed",
      },
    ]);
    const up = applySeries(tree, o);
    expect(up.action).toBe("updated");
    expect(up.changed.sort()).toEqual([
      "sglang/srt/kvctl_fixture/hooks.py",
      "sglang/srt/kvctl_fixture/sub/more.py",
    ]);
    expect(placedDrift(tree, o)).toEqual([]);
    expect(readFileSync(join(tree, "sglang/srt/kvctl_fixture/hooks.py"), "utf8")).toContain(
      "EXTRA = 1",
    );
  });

  it("re-apply after the series changed re-stages from the originals", () => {
    const tree = makeSitePackages();
    const pristine = fingerprint(tree);
    const series = seriesCopy();
    applySeries(tree, { series });
    // Drop 0002 from the series: its files go back to the originals, the rest stays.
    writeFileSync(join(series, "series"), "0001-pin-aware-evict.patch\n0003-note-file.patch\n");
    const r = applySeries(tree, { series });
    expect(r.action).toBe("updated");
    expect(r.messages).toContain("removed 0002-pin-aware-flush.patch (no longer in the series)");
    const now = fingerprint(tree);
    expect(now["sglang/srt/mem_cache/flush_cache.py"]).toBe(
      pristine["sglang/srt/mem_cache/flush_cache.py"],
    );
    expect(now["sglang/.kvctl-orig/srt/mem_cache/flush_cache.py"]).toBeUndefined();
    revertSeries(tree);
    expect(fingerprint(tree)).toEqual(pristine);
  });
});

d("tree layouts and version detection", () => {
  it("finds a git checkout (python/sglang) from its root, python/ and sglang/ dirs", () => {
    const root = tempDir("kvctl-checkout-");
    mkdirSync(join(root, ".git"));
    copySglang(join(root, "python"), undefined, false);
    writeFileSync(
      join(root, "python/pyproject.toml"),
      '[project]\nname = "sglang"\nversion = "0.5.23"\n\n[tool.x]\nversion = "9"\n',
    );
    for (const p of [root, join(root, "python"), join(root, "python/sglang")]) {
      const t = locateSglang(p);
      expect(t).toMatchObject({
        parent: join(root, "python"),
        layout: "git-checkout",
        version: "0.5.23",
      });
    }
    const before = fingerprint(root);
    const r = cli(["apply", root, ...S]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SGLang 0\.5\.23 at .*\/python\/sglang \(git-checkout/);
    expect(existsSync(join(root, "python/sglang/srt/kvctl_fixture/hooks.py"))).toBe(true);
    expect(cli(["revert", join(root, "python")]).status).toBe(0);
    expect(fingerprint(root)).toEqual(before);
  });

  it("a checkout whose version comes only from pyproject.toml (setuptools-scm: none) needs --sglang-version", () => {
    const root = tempDir("kvctl-checkout-");
    copySglang(
      join(root, "python"),
      [
        "__init__.py",
        "srt/mem_cache/evict_policy.py",
        "srt/mem_cache/flush_cache.py",
        "srt/mem_cache/README.md",
      ],
      false,
    );
    writeFileSync(
      join(root, "python/pyproject.toml"),
      '[project]\nname = "sglang"\ndynamic = ["version"]\n',
    );
    const r = cli(["check", root, ...S]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/cannot tell which SGLang version is at .*pass --sglang-version/);
    expect(cli(["check", root, ...S, "--sglang-version", "0.5.23"]).status).toBe(0);
  });

  it("reads the version from the dist-info METADATA when sglang has no _version.py", () => {
    const sp = copySglang(tempDir(), ["__init__.py", "srt/mem_cache/evict_policy.py"]);
    expect(locateSglang(sp)).toMatchObject({
      layout: "site-packages",
      version: "0.5.23",
      versionSource: "sglang-0.5.23.dist-info/METADATA",
    });
    expect(locateSglang(join(sp, "sglang")).parent).toBe(sp);
  });

  it("gives clear errors for a missing path and a dir without sglang", () => {
    const r = cli(["apply", "/nonexistent/kvctl-x", ...S]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/path not found: \/nonexistent\/kvctl-x/);
    const empty = tempDir();
    const r2 = cli(["status", empty, "--json"]);
    expect(r2.status).toBe(2);
    expect(r2.json.error).toMatchObject({ code: "not-found" });
    expect(r2.json.error.message).toMatch(/no sglang package found at/);
    const r3 = cli(["frobnicate", empty]);
    expect(r3.status).toBe(2);
    expect(r3.stderr).toMatch(/unknown subcommand 'frobnicate'/);
  });
});

d("CRLF, no newline at EOF, new and deleted files through a whole apply/revert", () => {
  it("is byte exact", () => {
    const tree = tempDir();
    mkdirSync(join(tree, "sglang"));
    writeFileSync(join(tree, "sglang/_version.py"), "__version__ = version = '0.5.23'\n");
    writeFileSync(join(tree, "sglang/win.py"), "a = 1\r\nb = 2\r\nc = 3"); // CRLF, no final newline
    writeFileSync(join(tree, "sglang/gone.py"), "x = 1\n");
    const series = join(tempDir("kvctl-series-"), "sglang-0.5.23");
    mkdirSync(series);
    writeFileSync(join(series, "series"), "0001-crlf.patch\n");
    writeFileSync(
      join(series, "0001-crlf.patch"),
      [
        "CRLF and EOF handling.",
        "",
        "--- a/sglang/win.py",
        "+++ b/sglang/win.py",
        "@@ -1,3 +1,4 @@",
        " a = 1\r",
        "-b = 2\r",
        "-c = 3",
        "\\ No newline at end of file",
        "+b = 20\r",
        "+c = 3\r",
        "+d = 4\r",
        "--- a/sglang/gone.py",
        "+++ /dev/null",
        "@@ -1 +0,0 @@",
        "-x = 1",
        "--- /dev/null",
        "+++ b/sglang/sub/new.py",
        "@@ -0,0 +1 @@",
        "+y = 2",
        "\\ No newline at end of file",
        "",
      ].join("\n"),
    );
    const before = fingerprint(tree);
    const r = applySeries(tree, { series });
    expect(r.ok, r.messages.join("\n")).toBe(true);
    expect(readFileSync(join(tree, "sglang/win.py"), "latin1")).toBe(
      "a = 1\r\nb = 20\r\nc = 3\r\nd = 4\r\n",
    );
    expect(existsSync(join(tree, "sglang/gone.py"))).toBe(false);
    expect(readFileSync(join(tree, "sglang/sub/new.py"), "latin1")).toBe("y = 2");
    expect(applySeries(tree, { series }).action).toBe("already-applied");
    revertSeries(tree);
    expect(fingerprint(tree)).toEqual(before);
    expect(existsSync(join(tree, "sglang/sub"))).toBe(false);
  });
});
