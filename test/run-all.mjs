#!/usr/bin/env node
// `npm test`: the static checks (scripts/lint.mjs: tsc, Biome, ruff, clang-format, tests, generated; one result
// each), then every suite of the project in one run (native C++ core, vitest, pytest), then one
// closing line `N passed, N failed, N skipped` summed over all of them. A lint finding fails the
// run; the suites still run. Prepares what a fresh clone lacks first: the Python venv
// (python/setup_venv.sh) and the native build (the addon, and the C++ tests rebuilt before ctest
// so they are never stale).
// A suite fails the run when it reports a failed test, when its runner exits non-zero for any
// other reason (vitest's unhandled errors and rejections are not counted as tests), when it ran no
// test at all, when a pytest module collected no test, and when a ctest binary is missing.
//   node test/run-all.mjs [lint native vitest pytest ...] [--no-setup]
//        [--vitest-root DIR] [--pytest-dir DIR] [--ctest-dir DIR]
// The directory options point a suite at another tree (test/run-all.test.ts runs the fixture
// suites of test/fixtures/runner/ that way); --no-setup skips the venv and native build steps.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const work = mkdtempSync(join(tmpdir(), "kvctl-test-"));
const argv = process.argv.slice(2);
function option(name) {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return null;
  const v = argv[i + 1];
  if (v === undefined || v.startsWith("--")) {
    console.error(`run-all: --${name} needs a directory`);
    process.exit(2);
  }
  argv.splice(i, 2);
  return resolve(v);
}
const vitestRoot = option("vitest-root");
const pytestDir = option("pytest-dir") ?? join(root, "python/tests");
const ctestDir = option("ctest-dir");
const setup = !argv.includes("--no-setup");
const only = argv.filter((a) => !a.startsWith("--")); // optional suite names: lint native vitest pytest
const want = (s) => only.length === 0 || only.includes(s);

function run(cmd, args, opts = {}) {
  console.log(`\n$ ${[cmd, ...args].join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", ...opts });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

function capture(cmd, args) {
  console.log(`\n$ ${[cmd, ...args].join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, encoding: "utf8", maxBuffer: 256 << 20 });
  process.stdout.write(r.stdout ?? "");
  process.stderr.write(r.stderr ?? "");
  return { status: r.status ?? 1, out: `${r.stdout ?? ""}${r.stderr ?? ""}` };
}

const totals = { passed: 0, failed: 0, skipped: 0 };
const rows = [];
function record(suite, passed, failed, skipped, note = "") {
  totals.passed += passed;
  totals.failed += failed;
  totals.skipped += skipped;
  rows.push(
    `${suite.padEnd(8)} ${passed} passed, ${failed} failed, ${skipped} skipped${note ? `  (${note})` : ""}`,
  );
}

// 1. Prerequisites: the venv (python oracles, SGLang, nats-server) and the addon.
// A build tree cmake-js configured is rebuilt incrementally (the C++ test binaries and the addon
// follow every native edit); without one, build-native configures and builds it.
if (setup) {
  if (run("bash", [join(root, "python/setup_venv.sh")]) !== 0)
    record("setup", 0, 1, 0, "python/setup_venv.sh failed");
  const build = existsSync(join(root, "build/CMakeCache.txt"))
    ? run("cmake", ["--build", join(root, "build"), "--parallel", "2"])
    : run(process.execPath, [join(root, "scripts/build-native.mjs")]);
  if (build !== 0) record("setup", 0, 1, 0, "native build failed");
}

// 2. Static checks: types, lint and formatting, before anything runs.
if (want("lint")) {
  const r = capture(process.execPath, [join(root, "scripts/lint.mjs"), "--json"]);
  const last = r.out
    .trim()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .at(-1);
  try {
    const j = JSON.parse(last ?? "");
    const failedChecks = Object.entries(j.checks)
      .filter(([, v]) => v === "failed")
      .map(([k]) => k);
    record(
      "lint",
      j.passed,
      j.failed,
      0,
      failedChecks.length ? `failed: ${failedChecks.join(", ")}` : "",
    );
  } catch {
    record("lint", 0, 1, 0, `scripts/lint.mjs exited ${r.status} without a summary`);
  }
}

// Every Python process of the run (pytest, the worker harnesses, the real SGLang servers) records
// coverage.py data of the files the patch series touches (COVERAGE_PROCESS_START; coverage's .pth
// starts it); step 6 checks that every line the series adds ran somewhere.
const py = process.env.KVCTL_PYTHON ?? join(root, ".venv/bin/python");
const covDir = join(work, "coverage");
const pyEnv = {
  ...process.env,
  PYTHONPATH: [join(root, "python"), process.env.PYTHONPATH].filter(Boolean).join(":"),
};
const ownSuites = !vitestRoot && pytestDir === join(root, "python/tests");
const hunks =
  ownSuites && want("vitest") && want("pytest") && process.env.KVCTL_HUNK_COVERAGE !== "0";
if (hunks) {
  const r = spawnSync(py, ["-m", "kvctl_testbed.hunk_coverage", "rcfile", "--data-dir", covDir], {
    cwd: root,
    env: pyEnv,
    encoding: "utf8",
  });
  if (r.status === 0) process.env.COVERAGE_PROCESS_START = r.stdout.trim();
  else
    record(
      "hunks",
      0,
      1,
      0,
      `coverage rcfile: ${(r.stderr || r.stdout).trim().split("\n").at(-1)}`,
    );
}

// 3. The native core's own unit tests (C++, registered with ctest by CMakeLists.txt).
if (want("native")) {
  const r = capture("ctest", [
    "--test-dir",
    ctestDir ?? join(root, "build"),
    "--output-on-failure",
  ]);
  const m = /(\d+)% tests passed, (\d+) tests failed out of (\d+)/.exec(r.out);
  if (m) {
    // ctest counts a test whose binary is missing ("***Not Run") among the failed; a skip
    // ("***Skipped" on its result line) is neither failed nor passed.
    const failed = Number(m[2]);
    const total = Number(m[3]);
    const skipped = (r.out.match(/\*\*\*Skipped/g) ?? []).length;
    const notRun = (r.out.match(/\*\*\*Not Run/g) ?? []).length;
    const unexplained = r.status !== 0 && failed === 0;
    const why = [
      notRun ? `${notRun} not run: binary missing` : "",
      unexplained ? `ctest exited ${r.status}` : "",
    ];
    record(
      "native",
      total - failed - skipped,
      failed + (unexplained ? 1 : 0),
      skipped,
      why.filter(Boolean).join("; "),
    );
    if (total === 0) record("native", 0, 1, 0, "ctest ran no test");
  } else record("native", 0, 1, 0, "ctest ran no test (no summary)");
}

// 4. vitest: TypeScript, addon bindings, NATS/ZMQ/python integration.
if (want("vitest")) {
  const out = join(work, "vitest.json");
  const where = vitestRoot ? ["--root", vitestRoot] : [];
  const status = run(join(root, "node_modules/.bin/vitest"), [
    "run",
    ...where,
    "--reporter=default",
    "--reporter=json",
    `--outputFile=${out}`,
  ]);
  if (existsSync(out)) {
    const j = JSON.parse(readFileSync(out, "utf8"));
    const skipped = (j.numPendingTests ?? 0) + (j.numTodoTests ?? 0);
    // A file that failed without a failed test (it did not load, or a hook failed and its tests
    // were skipped) counts as one failure.
    const broken = (j.testResults ?? []).filter(
      (f) =>
        f.status === "failed" && !(f.assertionResults ?? []).some((a) => a.status === "failed"),
    ).length;
    const failed = (j.numFailedTests ?? 0) + broken;
    // vitest exits 1 on an uncaught exception or unhandled rejection, which no test count shows.
    const unexplained = status !== 0 && failed === 0;
    if ((j.numTotalTests ?? 0) === 0 && failed === 0)
      record("vitest", 0, 1, skipped, "no test ran");
    else
      record(
        "vitest",
        j.numPassedTests ?? 0,
        failed + (unexplained ? 1 : 0),
        skipped,
        unexplained ? `vitest exited ${status}: unhandled errors (above)` : "",
      );
  } else record("vitest", 0, 1, 0, `vitest exited ${status} without a report`);
}

// 5. pytest: the worker-side patch kit and the python oracles.
if (want("pytest")) {
  const xml = join(work, "pytest.xml");
  // The plugin fails the session when a test module collected no test (pytest alone passes it).
  const status = run(
    py,
    ["-m", "pytest", pytestDir, "-q", "-p", "kvctl_testbed.empty_modules", `--junitxml=${xml}`],
    { env: { ...process.env, PYTHONPATH: pyEnv.PYTHONPATH } },
  );
  if (status === 5) record("pytest", 0, 1, 0, "no tests collected");
  else if (existsSync(xml)) {
    const x = readFileSync(xml, "utf8");
    const attr = (n) => Number(new RegExp(`<testsuite [^>]*\\b${n}="(\\d+)"`).exec(x)?.[1] ?? 0);
    const total = attr("tests");
    const failed = attr("failures") + attr("errors");
    const skipped = attr("skipped");
    const unexplained = status !== 0 && failed === 0;
    record(
      "pytest",
      total - failed - skipped,
      failed + (unexplained ? 1 : 0),
      skipped,
      unexplained ? `pytest exited ${status} with no failed test (above)` : "",
    );
  } else record("pytest", 0, 1, 0, `pytest exited ${status} without a report`);
}

// 6. Every line the patch series adds was executed by the harness tests or the real servers.
if (hunks && process.env.COVERAGE_PROCESS_START) {
  delete process.env.COVERAGE_PROCESS_START;
  const status = run(py, ["-m", "kvctl_testbed.hunk_coverage", "check", "--data-dir", covDir], {
    env: pyEnv,
  });
  record(
    "hunks",
    status === 0 ? 1 : 0,
    status === 0 ? 0 : 1,
    0,
    status === 0 ? "" : "added patch lines never executed (above)",
  );
}

console.log(`\n${rows.join("\n")}`);
console.log(`${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(totals.failed > 0 ? 1 : 0);
