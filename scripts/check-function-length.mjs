#!/usr/bin/env node
// The function-length check of `npm run lint`: a function fits on a screen. Each function-like
// node of src/ (declarations, methods, accessors, constructors, function expressions, arrows) is
// measured from its first line to its last, nested functions included, with the TypeScript
// parser. Over MAX_LINES:
//   - in src/gateway, src/policy, src/patch and src/cli: none allowed, each one is a finding;
//   - in the rest of src/: at most REST_ALLOWED in all; more fails, listing them.
// Exit 1 on any finding; every function over the limit is listed either way.
import { readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { tsFiles } from "./ts-files.mjs";

const MAX_LINES = 60;
const REST_ALLOWED = 5;
const STRICT = ["gateway", "policy", "patch", "cli"];

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function nameOf(n, sf) {
  if (n.name) return n.name.getText(sf);
  if (ts.isConstructorDeclaration(n)) return "constructor";
  const p = n.parent;
  if (
    p &&
    (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p)) &&
    p.name
  )
    return p.name.getText(sf);
  if (p && ts.isCallExpression(p)) return `(callback of ${p.expression.getText(sf).slice(0, 40)})`;
  return "(anonymous)";
}

/** Every function of a file longer than MAX_LINES, with its first line and length. */
function longFunctions(file) {
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out = [];
  const visit = (n) => {
    if (ts.isFunctionLike(n) && n.body) {
      const first = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
      const last = sf.getLineAndCharacterOfPosition(n.getEnd()).line;
      const lines = last - first + 1;
      if (lines > MAX_LINES)
        out.push({
          at: `${relative(root, file).split(sep).join("/")}:${first + 1}`,
          name: nameOf(n, sf),
          lines,
        });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

const strict = [];
const rest = [];
for (const file of tsFiles(join(root, "src"))) {
  const area = relative(join(root, "src"), file).split(sep)[0];
  for (const f of longFunctions(file)) (STRICT.includes(area) ? strict : rest).push(f);
}
const show = (f) => `${f.at} ${f.name}: ${f.lines} lines`;
for (const f of strict)
  console.error(
    `function-length: ${show(f)} (at most ${MAX_LINES} in src/${STRICT.join(", src/")})`,
  );
for (const f of rest)
  console.error(
    `function-length: ${show(f)}${rest.length > REST_ALLOWED ? ` (over ${MAX_LINES}: ${rest.length} outside the strict areas, at most ${REST_ALLOWED})` : " (allowed: one of at most five outside the strict areas)"}`,
  );
const failed = strict.length > 0 || rest.length > REST_ALLOWED;
console.log(
  `function-length: ${strict.length} over ${MAX_LINES} lines in src/${STRICT.join(", src/")}, ${rest.length} in the rest of src/ (at most ${REST_ALLOWED})`,
);
process.exit(failed ? 1 : 0);
