// The agentic workload of bench:agent: BFCL multi-turn sessions (bfcl.py, from the bfcl-eval
// wheel) laid out in time by a seeded generator whose shape follows published agent statistics
// (bench/agent/README.md has the sources): staggered session starts, tool calls of heavy-tailed
// per-tool duration, human idle gaps between user turns, reasoning about 40% of each answer, and
// occasional compaction of the history. Every duration is divided by one time-scale factor.
export interface BfclCall {
  name: string;
  arguments: Record<string, unknown>;
  result: string;
}
export interface BfclSession {
  id: string;
  classes: string[];
  tools: unknown[];
  turns: { user: string; calls: BfclCall[] }[];
}
export interface BfclWorkload {
  system_prompt: string;
  sessions: BfclSession[];
}

export interface PlannedCall extends BfclCall {
  /** How long the tool runs before its result comes back (ms, scaled). */
  toolMs: number;
}
export interface PlannedTurn {
  user: string;
  /** Human think time before this turn (ms, scaled; 0 for the first). */
  idleMs: number;
  /** The history is compacted before this turn (old tool exchanges dropped). */
  compact: boolean;
  calls: PlannedCall[];
  /** Characters of reasoning and of answer the final reply is constrained to. */
  reasoningChars: number;
  answerChars: number;
}
export interface PlannedSession {
  id: string;
  startMs: number;
  tools: unknown[];
  turns: PlannedTurn[];
}

export interface WorkloadShape {
  timeScale: number;
  /** Sessions start uniformly within this window (s, unscaled). */
  arrivalWindowS: number;
  /** Human idle gap between user turns: lognormal (s, unscaled). */
  idleMedianS: number;
  idleSigma: number;
  /** Tool durations: per tool a median drawn log-uniformly from this range, lognormal around it. */
  toolMedianRangeS: [number, number];
  toolSigma: number;
  compactProbability: number;
  /** Share of each final answer's characters that are reasoning. */
  reasoningShare: number;
  answerChars: number;
}

export const DEFAULT_SHAPE: WorkloadShape = {
  timeScale: 20,
  arrivalWindowS: 60,
  idleMedianS: 30,
  idleSigma: 1.0,
  toolMedianRangeS: [0.5, 8],
  toolSigma: 1.2,
  compactProbability: 0.1,
  reasoningShare: 0.4,
  answerChars: 120,
};

/** mulberry32: a small seeded generator, so every configuration replays the same trace. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function normal(r: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
}

export function planWorkload(w: BfclWorkload, shape: WorkloadShape, seed: number): PlannedSession[] {
  const r = rng(seed);
  const scale = (s: number) => Math.round((s * 1000) / shape.timeScale);
  const toolMedian = new Map<string, number>();
  const [lo, hi] = shape.toolMedianRangeS;
  const medianOf = (name: string) => {
    let m = toolMedian.get(name);
    if (m === undefined) {
      m = lo * (hi / lo) ** r();
      toolMedian.set(name, m);
    }
    return m;
  };
  return w.sessions.map((s) => ({
    id: s.id,
    startMs: scale(r() * shape.arrivalWindowS),
    tools: s.tools,
    turns: s.turns.map((t, k) => {
      const total = shape.answerChars;
      const reasoningChars = Math.max(8, Math.round(total * shape.reasoningShare));
      return {
        user: t.user,
        idleMs: k === 0 ? 0 : scale(shape.idleMedianS * Math.exp(shape.idleSigma * normal(r))),
        compact: k >= 2 && r() < shape.compactProbability,
        calls: t.calls.map((c) => ({ ...c, toolMs: scale(medianOf(c.name) * Math.exp(shape.toolSigma * normal(r))) })),
        reasoningChars,
        answerChars: Math.max(8, total - reasoningChars),
      };
    }),
  }));
}
