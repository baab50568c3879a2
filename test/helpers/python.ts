// Where the project's Python venv lives (created by python/setup_venv.sh, which `npm test` runs).
import { existsSync } from "node:fs";
import { packageRoot, venvPython } from "../../src/paths.js";

export { venvPython };
export const repoRoot = packageRoot;
export const hasVenv = existsSync(venvPython);
