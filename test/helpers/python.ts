// Where the project's Python venv lives (created by python/setup_venv.sh, which `npm test` runs).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const venvPython = process.env.KVCTL_PYTHON ?? join(repoRoot, ".venv", "bin", "python");
export const hasVenv = existsSync(venvPython);
