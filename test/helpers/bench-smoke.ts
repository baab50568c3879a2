// Runs `npm run bench:<name> -- --json --smoke` (the package script itself, so a renamed or broken
// script fails too) and returns its exit status and the JSON object its last line must be.
import { execFile } from "node:child_process";
import { packageRoot } from "../../src/addon.js";

export interface BenchRun {
  code: number;
  json: Record<string, unknown> | null;
  tail: string;
}

export function runBenchSmoke(
  name: string,
  timeoutMs: number,
  extraArgs: string[] = [],
): Promise<BenchRun> {
  return new Promise((resolve) => {
    execFile(
      "npm",
      ["run", "--silent", `bench:${name}`, "--", "--json", "--smoke", ...extraArgs],
      {
        cwd: packageRoot,
        timeout: timeoutMs,
        maxBuffer: 256 << 20,
        env: { ...process.env, PYTHONWARNINGS: "ignore" },
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        const last = stdout.trim().split("\n").at(-1) ?? "";
        let json: Record<string, unknown> | null = null;
        try {
          json = JSON.parse(last);
        } catch {
          json = null;
        }
        resolve({ code, json, tail: `${stdout.slice(-2000)}\n${stderr.slice(-3000)}` });
      },
    );
  });
}
