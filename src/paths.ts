// Where kvctl's own files live: the package root (patches/, python/, .venv/), found the same way
// from src/ (tsx) and dist/ (compiled), never from the current directory; and the project venv.
import { existsSync, readFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

function findPackage(): { root: string; version: string } {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      try {
        const meta = JSON.parse(readFileSync(pj, "utf8")) as { name?: string; version?: string };
        if (meta.name === "kvctl") return { root: dir, version: meta.version ?? "0.0.0" };
      } catch {
        // not ours; keep walking up
      }
    }
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  // src/ and dist/ both sit one level below the root.
  return { root: join(dirname(fileURLToPath(import.meta.url)), ".."), version: "0.0.0" };
}

const pkg = findPackage();
/** The kvctl package root (package.json, patches/, python/, build/). */
export const packageRoot: string = pkg.root;
export const packageVersion: string = pkg.version;
/** The project venv made by python/setup_venv.sh ($KVCTL_VENV overrides). */
export const venvDir: string = process.env.KVCTL_VENV ?? join(packageRoot, ".venv");
/** Its interpreter ($KVCTL_PYTHON overrides). */
export const venvPython: string = process.env.KVCTL_PYTHON ?? join(venvDir, "bin", "python");
/** NVIDIA Dynamo's own target folder (python/setup_venv.sh installs it there; on PYTHONPATH where Dynamo runs). */
export const dynamoSite: string = process.env.KVCTL_DYNAMO_SITE ?? join(venvDir, "dynamo-1.6.1");

/**
 * The environment of one of our Python processes over a patched SGLang tree: the CPU stand-ins
 * (python/tests/stand_ins) and our packages (python/) ahead of the tree, warnings off.
 */
export function patchedTreeEnv(
  tree: string,
  extra: Record<string, string> = {},
): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PYTHONPATH: [
      join(packageRoot, "python", "tests", "stand_ins"),
      join(packageRoot, "python"),
      tree,
      process.env.PYTHONPATH ?? "",
    ].join(delimiter),
    PYTHONWARNINGS: "ignore",
    ...extra,
  };
}
