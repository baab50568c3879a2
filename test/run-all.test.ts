// test/run-all.mjs on the deliberately broken suites of test/fixtures/runner/: each broken piece
// (an unhandled rejection in a vitest file, a pytest module that collects no test, a ctest binary
// that is missing) turns the closing summary red and the exit status 1; without it the same run
// is green. A suite that ran no test at all is red too. The fixtures are copied to a temp dir so
// that removing a piece leaves the tree alone; the cases run in order on the one copy.
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "kvctl-runner-"));
  cpSync(join(packageRoot, "test/fixtures/runner"), dir, { recursive: true });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Run = { code: number; summary: string; rows: string[] };
function runAll(suite: string): Promise<Run> {
  const args = [join(packageRoot, "test/run-all.mjs"), "--no-setup", suite];
  args.push(
    "--vitest-root",
    join(dir, "vitest"),
    "--pytest-dir",
    join(dir, "pytest"),
    "--ctest-dir",
    join(dir, "ctest"),
  );
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      args,
      { cwd: packageRoot, maxBuffer: 64 << 20, timeout: 150_000 },
      (err, stdout) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        if (code === -1) return reject(err);
        const lines = stdout.trim().split("\n");
        resolve({
          code,
          summary: lines.at(-1) ?? "",
          rows: lines.filter((l) => l.startsWith(`${suite.padEnd(8)} `)),
        });
      },
    );
  });
}

const red = (r: Run, note: RegExp) => {
  expect(r.code).toBe(1);
  expect(r.summary).toMatch(/^\d+ passed, [1-9]\d* failed, \d+ skipped$/);
  expect(r.rows.join("\n")).toMatch(note);
};
const green = (r: Run, passed: number) => {
  expect(r.code).toBe(0);
  expect(r.summary).toBe(`${passed} passed, 0 failed, 0 skipped`);
};

describe("test/run-all.mjs fails on anything that failed", () => {
  it("an unhandled rejection in a passing vitest file is a failure", async () => {
    red(await runAll("vitest"), /2 passed, 1 failed.*unhandled errors/);
    unlinkSync(join(dir, "vitest/unhandled-rejection.test.mjs"));
    green(await runAll("vitest"), 1);
  });

  it("vitest finding no test file is a failure", async () => {
    unlinkSync(join(dir, "vitest/passes.test.mjs"));
    red(await runAll("vitest"), /0 passed, 1 failed.*no test ran/);
  });

  it("a pytest module that collects no test is a failure", async () => {
    red(await runAll("pytest"), /1 passed, 1 failed.*no failed test/);
    unlinkSync(join(dir, "pytest/test_empty.py"));
    green(await runAll("pytest"), 1);
  });

  it("pytest collecting nothing at all is a failure, not a clean pass", async () => {
    unlinkSync(join(dir, "pytest/test_passes.py"));
    red(await runAll("pytest"), /0 passed, 1 failed.*no tests collected/);
  });

  it("a ctest binary that is missing is one failure (not also a skip)", async () => {
    green(await runAll("native"), 2);
    unlinkSync(join(dir, "ctest/fixture_binary"));
    const r = await runAll("native");
    red(r, /1 passed, 1 failed, 0 skipped {2}\(1 not run: binary missing\)/);
  });
});
