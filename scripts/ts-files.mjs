// The TypeScript sources under a folder (declaration files aside), sorted: the one walk the source
// checks (check-imports, check-function-length) share.
import { readdirSync } from "node:fs";
import { join } from "node:path";

export function tsFiles(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...tsFiles(p));
    else if (e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) out.push(p);
  }
  return out.sort();
}
