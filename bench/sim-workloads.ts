// kvctl sim's bench families: bench:agent's own sessions (bench/agent/families.ts: BFCL's or
// mini-swe-agent's data) planned by its own generator (bench/agent/workload.ts) at real time (time
// scale 1), rendered as sim programs with estimated token counts (src/sim/workload/agent-families.ts).
import type { SimWorkload } from "../src/sim/types.js";
import {
  agentFamilyWorkload,
  DEFAULT_CHARS_PER_TOKEN,
} from "../src/sim/workload/agent-families.js";
import { type Family, familyShape, loadFamily } from "./agent/families.js";
import { planWorkload } from "./agent/workload.js";

export interface BenchFamilyOptions {
  family: Family;
  sessions: number;
  seed: number;
  /** bfcl: functions per class (bench:agent's default 5). */
  toolsPerClass?: number;
  /** coding: median steps (40), lines per read (20). */
  codingSteps?: number;
  codingReadLines?: number;
  /** The sessions' context limit in (estimated) tokens, where they compact (bench:agent's: 7168 bfcl, 24576 coding). */
  contextLimit?: number;
  charsPerToken?: number;
  vocab?: number;
}

export function benchFamilyWorkload(o: BenchFamilyOptions): SimWorkload {
  const cpt = o.charsPerToken ?? DEFAULT_CHARS_PER_TOKEN;
  const data = loadFamily({
    family: o.family,
    sessions: o.sessions,
    seed: o.seed,
    toolsPerClass: o.toolsPerClass ?? 5,
    codingSteps: o.codingSteps ?? 40,
    codingReadLines: o.codingReadLines ?? 20,
  });
  const base = familyShape(o.family, o.contextLimit ?? 24576, 1);
  // The planner compacts by its own size estimate: the same one the programs are sized with.
  const shape = {
    ...base,
    charsPerToken: cpt,
    contextLimitTokens: o.contextLimit ?? base.contextLimitTokens,
  };
  const sessions = planWorkload(data, shape, o.seed);
  return agentFamilyWorkload(sessions, {
    family: o.family,
    system: data.system_prompt,
    charsPerToken: cpt,
    vocab: o.vocab,
    seed: o.seed,
  });
}
