// Where the kvctl package lives (the series and python/ sources are resolved from here, never
// from the current directory) and its version (recorded in the state file).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

let cached: { root: string; version: string } | undefined;

function findPackage(): { root: string; version: string } {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      try {
        const meta = JSON.parse(readFileSync(pj, "utf8")) as { name?: string; version?: string };
        if (meta.name === "kvctl") return (cached = { root: dir, version: meta.version ?? "0.0.0" });
      } catch {
        // not ours; keep walking up
      }
    }
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  // Should not happen inside the package; fall back to two levels up from src/patch or dist/patch.
  return (cached = { root: join(dirname(fileURLToPath(import.meta.url)), "..", ".."), version: "0.0.0" });
}

/** The kvctl package root (contains package.json, patches/, python/). */
export const kvctlRoot = (): string => findPackage().root;
export const kvctlVersion = (): string => findPackage().version;
/** Default directory holding the sglang-<version>/ series directories. */
export const defaultPatchesDir = (): string => join(kvctlRoot(), "patches");
