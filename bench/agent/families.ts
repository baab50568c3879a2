// bench:agent's two workload families and where their data comes from: BFCL multi-turn sessions
// (bfcl.py, from the bfcl-eval wheel) and coding-agent sessions (coding.py, mini-swe-agent's
// harness over the standard library), each laid out in time by the one generator (workload.ts).
// bench:agent and kvctl sim's bench families (bench/sim-workloads.ts) load them from here.
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packageRoot, venvPython } from "../../src/paths.js";
import { unpackedWheel } from "./wheels.js";
import { type BfclWorkload, DEFAULT_SHAPE, type WorkloadShape } from "./workload.js";

export type Family = "bfcl" | "coding";

export const BFCL_VERSION = "2026.3.23";
export const MINI_SWE_AGENT_VERSION = "2.4.6";

export interface FamilyOptions {
  family: Family;
  sessions: number;
  seed: number;
  /** bfcl: the functions each class offers (its most called ones). */
  toolsPerClass: number;
  /** coding: median tool steps per session, lines per file read. */
  codingSteps: number;
  codingReadLines: number;
}

/** The family's sessions with their real data (tool results from BFCL's backends or real reads). */
export function loadFamily(o: FamilyOptions): BfclWorkload {
  const [script, args] =
    o.family === "coding"
      ? [
          "coding.py",
          [
            unpackedWheel(
              "mini-swe-agent",
              MINI_SWE_AGENT_VERSION,
              "mini-swe-agent",
              "minisweagent/config/benchmarks/swebench.yaml",
            ),
            String(o.sessions),
            String(o.seed),
            String(o.codingSteps),
            String(o.codingReadLines),
          ],
        ]
      : [
          "bfcl.py",
          [
            unpackedWheel("bfcl-eval", BFCL_VERSION, "bfcl", "bfcl_eval/data"),
            String(o.sessions),
            String(o.seed),
            String(o.toolsPerClass),
          ],
        ];
  const out = execFileSync(venvPython, [join(packageRoot, "bench", "agent", script), ...args], {
    encoding: "utf8",
    maxBuffer: 256 << 20,
    cwd: tmpdir(),
  });
  return JSON.parse(out) as BfclWorkload;
}

/** The trace's shape: coding sessions have their own context limit and think before every step. */
export function familyShape(
  family: Family,
  codingContext: number,
  timeScale: number,
): WorkloadShape {
  if (family === "coding")
    return {
      ...DEFAULT_SHAPE,
      timeScale,
      contextLimitTokens: codingContext,
      toolReasoningChars: 48,
    };
  return { ...DEFAULT_SHAPE, timeScale };
}
