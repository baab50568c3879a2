#!/usr/bin/env node
// `npm run bench:pin [-- --json]`: the pin flood benchmark on the patched SGLang cache (CPU).
// python/bench/pin_flood.py builds the patched temp tree itself (python/tests/sglang_tree.py:
// copy of the venv's sglang + `kvctl patch apply`) and prints the table (+ a JSON line).
// `npm run bench:pin -- --server [--json]`: the same sweep against real patched SGLang servers
// on CPU (bench/pin-server.ts).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const py = join(root, ".venv", "bin", "python");
if (!existsSync(py)) {
  const s = spawnSync("bash", [join(root, "python", "setup_venv.sh")], {
    cwd: root,
    stdio: "inherit",
  });
  if (s.status !== 0) process.exit(s.status ?? 1);
}
const argv = process.argv.slice(2);
const opts = { cwd: root, stdio: "inherit", env: { ...process.env, PYTHONWARNINGS: "ignore" } };
const r = argv.includes("--server")
  ? spawnSync(process.execPath, ["--import", "tsx", join("bench", "pin-server.ts"), ...argv], opts)
  : spawnSync(py, [join("python", "bench", "pin_flood.py"), ...argv], opts);
process.exit(r.status ?? 1);
