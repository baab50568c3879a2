#!/usr/bin/env node
// `npm run bench:pin [-- --json]`: the pin flood benchmark on the patched SGLang cache (CPU).
// python/bench/pin_flood.py builds the patched temp tree itself (python/tests/sglang_tree.py:
// copy of the venv's sglang + `kvctl patch apply`) and prints the table (+ a JSON line).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const py = join(root, ".venv", "bin", "python");
if (!existsSync(py)) {
  const s = spawnSync("bash", [join(root, "python", "setup_venv.sh")], { cwd: root, stdio: "inherit" });
  if (s.status !== 0) process.exit(s.status ?? 1);
}
const r = spawnSync(py, [join("python", "bench", "pin_flood.py"), ...process.argv.slice(2)], {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, PYTHONWARNINGS: "ignore" },
});
process.exit(r.status ?? 1);
