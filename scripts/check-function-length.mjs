#!/usr/bin/env node
// The function-length check of `npm run lint`: a function fits on a screen. Each function-like
// node of src/, bench/ and scripts/ (declarations, methods, accessors, constructors, function
// expressions, arrows; TypeScript and JavaScript sources alike) is measured as Biome formats it,
// from its first line to its last, nested functions included, with the TypeScript parser. One
// over MAX_LINES is a finding; every one is listed.
//   node scripts/check-function-length.mjs [FILE ...]   (default: every source of the three trees)
// Exit 1 on any finding.
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { sourceFiles } from "./ts-files.mjs";

const MAX_LINES = 60;
const TREES = ["src", "bench", "scripts"];

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
export function longFunctions(file) {
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

const named = process.argv.slice(2).map((f) => resolve(f));
const files = named.length ? named : TREES.flatMap((t) => sourceFiles(join(root, t)));
const found = files.flatMap(longFunctions);
for (const f of found)
  console.error(`function-length: ${f.at} ${f.name}: ${f.lines} lines (at most ${MAX_LINES})`);
console.log(
  `function-length: ${files.length} files of ${named.length ? "the command line" : `${TREES.join("/, ")}/`}, ${found.length} function(s) over ${MAX_LINES} lines`,
);
process.exit(found.length > 0 ? 1 : 0);
