#!/usr/bin/env node
// The import check of `npm run lint`: the gateway (src/gateway/) and the agent policies
// (src/policy/) share only the contract (src/contract/), and no import circle runs through src/.
//   - a file under src/gateway/ importing one under src/policy/, or the other way round, fails;
//   - every import circle among the files of src/ fails (static, dynamic and type-only imports
//     alike: a type-only circle still ties the two files' shapes to each other);
//   - src/gateway's longest import chain, and the most files of src/gateway importing one module
//     (the logger and the error types apart), past their limits (MAX_CHAIN, MAX_IMPORTERS) fail;
//     both are reported on every run.
// Exit 1 with one line per finding.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { tsFiles } from "./ts-files.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(root, "src");

/** Module specifiers a file imports: import/export declarations, import() and import types. */
function specifiers(file) {
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out = [];
  const visit = (n) => {
    if (
      (ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) &&
      n.moduleSpecifier &&
      ts.isStringLiteral(n.moduleSpecifier)
    )
      out.push(n.moduleSpecifier.text);
    else if (
      ts.isCallExpression(n) &&
      n.expression.kind === ts.SyntaxKind.ImportKeyword &&
      n.arguments[0] &&
      ts.isStringLiteralLike(n.arguments[0])
    )
      out.push(n.arguments[0].text);
    else if (
      ts.isImportTypeNode(n) &&
      ts.isLiteralTypeNode(n.argument) &&
      ts.isStringLiteral(n.argument.literal)
    )
      out.push(n.argument.literal.text);
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

/** The src/ file a relative specifier names (".js" written for the ".ts" source), or null. */
function target(from, spec) {
  if (!spec.startsWith(".")) return null;
  const p = resolve(dirname(from), spec);
  for (const c of [p.replace(/\.js$/, ".ts"), `${p}.ts`, join(p, "index.ts")])
    if (existsSync(c)) return c;
  return null;
}

/**
 * The bars on the gateway's layering (src/gateway/README.md): no import chain longer than 8 files,
 * and no module imported by more than 10 files of src/gateway (its logger and error types exempt,
 * by name below). Eight files is the whole depth from the leaves to index.ts.
 */
const MAX_CHAIN = 8;
const MAX_IMPORTERS = 10;
const FAN_IN_EXEMPT = new Set(["src/gateway/core/logger.ts", "src/gateway/core/errors.ts"]);

const rel = (p) => relative(root, p).split(sep).join("/");
const areaOf = (p) => rel(p).split("/")[1];

const files = tsFiles(src);
const graph = new Map(files.map((f) => [f, []]));
const findings = [];
for (const f of files) {
  for (const spec of specifiers(f)) {
    const t = target(f, spec);
    if (!t || !graph.has(t)) continue;
    graph.get(f).push(t);
    const [a, b] = [areaOf(f), areaOf(t)];
    const crosses = (a === "gateway" && b === "policy") || (a === "policy" && b === "gateway");
    if (crosses)
      findings.push(`${rel(f)} imports ${rel(t)}: gateway/ and policy/ share only src/contract/`);
  }
}

// Circles: strongly connected components of more than one file (or a file importing itself).
let counter = 0;
const index = new Map();
const low = new Map();
const stack = [];
const onStack = new Set();
function strongConnect(v) {
  index.set(v, counter);
  low.set(v, counter++);
  stack.push(v);
  onStack.add(v);
  for (const w of graph.get(v)) {
    if (!index.has(w)) {
      strongConnect(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
  }
  if (low.get(v) !== index.get(v)) return;
  const comp = [];
  let w;
  do {
    w = stack.pop();
    onStack.delete(w);
    comp.push(w);
  } while (w !== v);
  if (comp.length > 1 || graph.get(v).includes(v))
    findings.push(`import circle: ${comp.map(rel).sort().join(" <-> ")}`);
}
for (const f of files) if (!index.has(f)) strongConnect(f);

// The gateway's depth and fan-in: its longest import chain, and the modules most files import.
const inGateway = (f) => rel(f).startsWith("src/gateway/");
const longest = new Map();
function chainFrom(v) {
  if (longest.has(v)) return longest.get(v);
  longest.set(v, [v]); // a circle (reported above) ends the chain here
  let best = [v];
  for (const w of graph.get(v))
    if (inGateway(w) && w !== v) {
      const c = chainFrom(w);
      if (c.length + 1 > best.length) best = [v, ...c];
    }
  longest.set(v, best);
  return best;
}
let chain = [];
for (const f of files.filter(inGateway)) {
  const c = chainFrom(f);
  if (c.length > chain.length) chain = c;
}
const importers = new Map();
for (const f of files.filter(inGateway))
  for (const t of new Set(graph.get(f)))
    if (inGateway(t)) importers.set(t, (importers.get(t) ?? 0) + 1);
const fanIn = [...importers].filter(([t]) => !FAN_IN_EXEMPT.has(rel(t)));
const widest = fanIn.sort((a, b) => b[1] - a[1])[0] ?? [null, 0];
if (chain.length > MAX_CHAIN)
  findings.push(
    `src/gateway's longest import chain is ${chain.length} files (at most ${MAX_CHAIN}): ${chain.map((f) => rel(f).slice(12)).join(" -> ")}`,
  );
for (const [t, n] of fanIn)
  if (n > MAX_IMPORTERS)
    findings.push(`${rel(t)} is imported by ${n} files of src/gateway (at most ${MAX_IMPORTERS})`);

for (const line of findings) console.error(`imports: ${line}`);
console.log(
  `imports: ${files.length} files, ${findings.length === 0 ? "no finding" : `${findings.length} finding(s)`}; src/gateway: longest chain ${chain.length} files, most importers ${widest[1]} (${widest[0] ? rel(widest[0]) : "none"})`,
);
process.exit(findings.length === 0 ? 0 : 1);
