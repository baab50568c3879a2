// The sources under a folder, sorted: the one walk the source checks (check-imports,
// check-function-length) share. tsFiles: TypeScript (declaration files aside); sourceFiles: those
// and the JavaScript modules (.mjs, .js) beside them.
import { readdirSync } from "node:fs";
import { join } from "node:path";

function walk(dir, keep) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p, keep));
    else if (keep(e.name)) out.push(p);
  }
  return out.sort();
}

export function tsFiles(dir) {
  return walk(dir, (n) => n.endsWith(".ts") && !n.endsWith(".d.ts"));
}

export function sourceFiles(dir) {
  return walk(dir, (n) => (n.endsWith(".ts") && !n.endsWith(".d.ts")) || /\.m?js$/.test(n));
}
