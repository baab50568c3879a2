// Directory housekeeping shared by apply, revert and crash recovery.
import { existsSync, readdirSync, rmdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { step } from "./fault.js";

/** Removes now-empty directories we created (and Python's __pycache__ inside them), deepest first. */
export function cleanupDirs(parent: string, dirs: string[]): void {
  for (const rel of [...dirs].sort((a, b) => b.length - a.length)) {
    const abs = join(parent, rel);
    if (!existsSync(abs)) continue;
    const cache = join(abs, "__pycache__");
    try {
      if (existsSync(cache) && readdirSync(cache).every((n) => n.endsWith(".pyc"))) {
        step();
        rmSync(cache, { recursive: true });
      }
      if (readdirSync(abs).length === 0) {
        step();
        rmdirSync(abs);
      }
    } catch {
      // leave it; it holds something that is not ours
    }
  }
}

/** Removes `dir` and every directory under it that holds no files. */
export function removeEmptyTree(dir: string): void {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) return;
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) removeEmptyTree(p);
  }
  try {
    if (readdirSync(dir).length === 0) {
      step();
      rmdirSync(dir);
    }
  } catch {
    // not empty
  }
}
