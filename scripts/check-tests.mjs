#!/usr/bin/env node
// A test that cannot fail is worse than none. Flags, with file:line:
//   vitest (test/**/*.test.ts): a test whose body makes no assertion (expect/assert, or a call to
//     a function of the same file that does), and a `return` before the test's first assertion
//     (an early exit that turns the test into a pass without checking anything);
//   pytest (python/tests/test_*.py): a test function with no assert, pytest.raises/fail, or call
//     to a function (of the module or a helper module of python/tests) that asserts.
// The fixture suites under test/fixtures/ are not the project's tests and are not read.
//   node scripts/check-tests.mjs        exit 1 on any finding (scripts/lint.mjs runs it)
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const findings = [];

function walk(dir, keep, out = []) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== "node_modules" && e.name !== "fixtures") walk(p, keep, out);
    } else if (keep(e.name)) out.push(p);
  }
  return out;
}

// ---- vitest ---------------------------------------------------------------------------------
const TEST_FNS = new Set(["it", "test"]);
const isFn = (n) =>
  n && (ts.isArrowFunction(n) || ts.isFunctionExpression(n) || ts.isFunctionDeclaration(n));

// The called name at the root of a callee: it / it.each(...) / test.skipIf(x) / it.concurrent.
function rootName(expr) {
  while (expr) {
    if (ts.isIdentifier(expr)) return expr.text;
    if (ts.isPropertyAccessExpression(expr)) expr = expr.expression;
    else if (ts.isCallExpression(expr)) expr = expr.expression;
    else return null;
  }
  return null;
}
function calleeName(call) {
  const e = call.expression;
  if (ts.isIdentifier(e)) return e.text;
  if (ts.isPropertyAccessExpression(e)) return e.name.text;
  return null;
}

function checkVitestFile(file) {
  const text = readFileSync(file, "utf8");
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const firstAssert = assertFinder(sf);
  const visit = (n) => {
    if (
      ts.isCallExpression(n) &&
      TEST_FNS.has(rootName(n.expression)) &&
      !/^(todo|skip)$/.test(calleeName(n) ?? "")
    ) {
      const fn = n.arguments.find((a) => isFn(a));
      if (fn?.body) checkTest(file, sf, n, fn, firstAssert);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
}

/** Where a node's first assertion starts (-1: none): expect/assert, or a call of a function of the
 * file that asserts (directly or through another). */
function assertFinder(sf) {
  const bodies = new Map();
  const collect = (n) => {
    if (ts.isFunctionDeclaration(n) && n.name && n.body) bodies.set(n.name.text, n.body);
    if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && isFn(n.initializer))
      bodies.set(n.name.text, n.initializer.body);
    ts.forEachChild(n, collect);
  };
  collect(sf);
  const asserting = new Set();
  const isAssertCall = (call) => {
    const name = rootName(call.expression);
    const callee = calleeName(call);
    return (
      name === "expect" ||
      name === "assert" ||
      /^(expect|assert)/.test(callee ?? "") ||
      asserting.has(callee) ||
      asserting.has(name)
    );
  };
  const firstAssert = (node) => {
    let at = -1;
    const visit = (n) => {
      if (at >= 0) return;
      if (ts.isCallExpression(n) && isAssertCall(n)) at = n.getStart(sf);
      else ts.forEachChild(n, visit);
    };
    visit(node);
    return at;
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (const [name, body] of bodies) {
      if (!asserting.has(name) && firstAssert(body) >= 0) {
        asserting.add(name);
        changed = true;
      }
    }
  }
  return firstAssert;
}

/** One test: it asserts, and returns nowhere in its own body before its first assertion. */
function checkTest(file, sf, call, fn, firstAssert) {
  const line = (pos) => sf.getLineAndCharacterOfPosition(pos).line + 1;
  const title =
    call.arguments[0] && ts.isStringLiteralLike(call.arguments[0])
      ? call.arguments[0].text
      : "(test)";
  const at = firstAssert(fn.body);
  if (at < 0)
    findings.push(
      `${relative(root, file)}:${line(call.getStart(sf))}: test "${title}" makes no assertion`,
    );
  // A return in the test's own body (not a nested function) before its first assertion.
  const early = (m) => {
    if (isFn(m)) return;
    if (ts.isReturnStatement(m) && (at < 0 || m.getStart(sf) < at)) {
      findings.push(
        `${relative(root, file)}:${line(m.getStart(sf))}: test "${title}" returns before its first assertion`,
      );
    }
    ts.forEachChild(m, early);
  };
  if (ts.isBlock(fn.body)) ts.forEachChild(fn.body, early);
}

for (const f of walk(join(root, "test"), (n) => n.endsWith(".test.ts"))) checkVitestFile(f);

// ---- pytest (Python's own parser, from the project venv) ------------------------------------
const PY = `
import ast, json, sys
files = sys.argv[1:]
trees = {f: ast.parse(open(f).read(), f) for f in files}
def asserts(node, helpers):
    for n in ast.walk(node):
        if isinstance(n, ast.Assert):
            return True
        if isinstance(n, ast.Raise) and n.exc is not None and "AssertionError" in ast.unparse(n.exc):
            return True
        if isinstance(n, ast.Call):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if name in ("raises", "fail", "warns") or name in helpers:
                return True
    return False
def functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
helpers = set()
changed = True
while changed:
    changed = False
    for f, t in trees.items():
        for fn in functions(t):
            if not fn.name.startswith("test") and fn.name not in helpers and asserts(fn, helpers):
                helpers.add(fn.name)
                changed = True
out = []
for f, t in trees.items():
    if not f.rsplit("/", 1)[-1].startswith("test_"):
        continue
    for fn in functions(t):
        if fn.name.startswith("test") and not asserts(fn, helpers):
            out.append(f"{f}:{fn.lineno}: test {fn.name} makes no assertion")
print(json.dumps(out))
`;
const venvPy = join(process.env.KVCTL_VENV ?? join(root, ".venv"), "bin", "python");
const py = existsSync(venvPy) ? venvPy : "python3";
const pyFiles = walk(join(root, "python", "tests"), (n) => n.endsWith(".py"));
const r = spawnSync(py, ["-c", PY, ...pyFiles], { encoding: "utf8" });
if (r.status !== 0)
  findings.push(
    `python/tests: the check could not run: ${(r.stderr || r.error?.message || "").trim().split("\n").at(-1)}`,
  );
else
  for (const f of JSON.parse(r.stdout)) findings.push(f.startsWith(root) ? relative(root, f) : f);

for (const f of findings) console.error(f);
console.log(`check-tests: ${findings.length} finding(s)`);
process.exit(findings.length > 0 ? 1 : 0);
