// The agentic workload of bench:agent: BFCL multi-turn sessions (bfcl.py, from the bfcl-eval
// wheel) laid out in time by a seeded generator whose shape follows published agent statistics
// (bench/agent/README.md has the sources): staggered session starts, tool calls of heavy-tailed
// per-tool duration, human idle gaps between user turns, reasoning about 40% of each answer, and
// compaction of the history when the session nears its context limit (as agent harnesses
// auto-compact). Every duration is divided by one time-scale factor.
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
  /** The history is compacted before this step (the context neared its limit inside a tool loop). */
  compactBefore: boolean;
  /** Characters of reasoning before the call (0: none), left out of the history like an answer's. */
  reasoningChars: number;
}
export interface PlannedTurn {
  user: string;
  /** Human think time before this turn (ms, scaled; 0 for the first). */
  idleMs: number;
  /** The history is compacted before this turn (rewritten to a summary of the earlier requests). */
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
  /** The session's context limit (tokens) and the share of it at which the history is compacted. */
  contextLimitTokens: number;
  compactAtShare: number;
  /** Characters per token for the planner's size estimate (the same estimate for every configuration). */
  charsPerToken: number;
  /** Share of each final answer's characters that are reasoning. */
  reasoningShare: number;
  /** Characters of reasoning before each tool call (0: none; coding agents think before each step). */
  toolReasoningChars: number;
  answerChars: number;
}

export const DEFAULT_SHAPE: WorkloadShape = {
  timeScale: 20,
  arrivalWindowS: 60,
  idleMedianS: 30,
  idleSigma: 1.0,
  toolMedianRangeS: [0.5, 8],
  toolSigma: 1.2,
  contextLimitTokens: 7168,
  compactAtShare: 0.8,
  charsPerToken: 1.25,
  reasoningShare: 0.4,
  toolReasoningChars: 0,
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

/** What the history of a compacted session keeps: one summary exchange (see driver.ts). */
export const SUMMARY_OVERHEAD_CHARS = 120;

export function planWorkload(
  w: BfclWorkload,
  shape: WorkloadShape,
  seed: number,
): PlannedSession[] {
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
  const limitChars = shape.contextLimitTokens * shape.compactAtShare * shape.charsPerToken;
  return w.sessions.map((s) => {
    // The prompt's size as the planner estimates it: system prompt, tools, then the history.
    const fixed = w.system_prompt.length + JSON.stringify(s.tools).length;
    let history = 0;
    let asked = 0;
    // Compaction keeps a summary of the earlier requests (and, inside a tool loop, the current one).
    const compactIfNear = (next: number, kept: number): boolean => {
      const after = asked + SUMMARY_OVERHEAD_CHARS + kept;
      if (fixed + history + next <= limitChars || history <= after) return false;
      history = after;
      return true;
    };
    return {
      id: s.id,
      startMs: scale(r() * shape.arrivalWindowS),
      tools: s.tools,
      turns: s.turns.map((t, k) => {
        const total = shape.answerChars;
        const reasoningChars = Math.max(8, Math.round(total * shape.reasoningShare));
        const idleMs =
          k === 0 ? 0 : scale(shape.idleMedianS * Math.exp(shape.idleSigma * normal(r)));
        const compact = compactIfNear(t.user.length, 0);
        history += t.user.length;
        const calls = t.calls.map((c) => {
          const toolMs = scale(medianOf(c.name) * Math.exp(shape.toolSigma * normal(r)));
          const step = JSON.stringify(c.arguments).length + c.name.length + c.result.length;
          const compactBefore = compactIfNear(step, t.user.length);
          history += step;
          return { ...c, toolMs, compactBefore, reasoningChars: shape.toolReasoningChars };
        });
        const answerChars = Math.max(8, total - reasoningChars);
        history += answerChars;
        asked += t.user.length + 1;
        return { user: t.user, idleMs, compact, calls, reasoningChars, answerChars };
      }),
    };
  });
}
