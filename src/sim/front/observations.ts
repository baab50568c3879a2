// The observations a turn gives the policy, built as the gateway builds them (turn.ts's
// TurnStarted, turn-record.ts's TurnFinished) from what the simulated worker reports. A simulated
// answer is a tool call when its program's next request carries that tool's result.
import type { TierCounts } from "../../index/index.js";
import type { Observation } from "./parts.js";
import type { Turn, TurnResult } from "./types.js";

/** Whether the turn's answer calls a tool (its program's next request is that tool's result). */
export function callsTool(turn: Turn): boolean {
  return turn.program.requests[turn.n + 1]?.gapKind === "tool";
}

function toolCalls(turn: Turn): { id: string; name: string | null }[] {
  if (!callsTool(turn)) return [];
  return [{ id: `${turn.rid}-call`, name: turn.program.requests[turn.n + 1].tool ?? null }];
}

/** Token ids the gateway would hold for the turn: only their count is read, so none are kept. */
function ids(n: number): number[] {
  return new Array<number>(n);
}

function commonPrefix(a: readonly bigint[], b: BigInt64Array): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

export function turnStarted(
  turn: Turn,
  nowMs: number,
  reason: string,
  overlap: TierCounts | null,
  model: string,
): Observation {
  const prev = turn.n > 0 ? `${turn.program.id}#${turn.n - 1}-call` : null;
  return {
    type: "TurnStarted",
    at: nowMs,
    requestId: turn.rid,
    sessionId: turn.session,
    route: "chat",
    stream: false,
    worker: turn.worker as string,
    reason,
    promptBlocks: Array.from(turn.prepared.promptHashes),
    overlap,
    model,
    tail: {
      role: turn.spec.gapKind === "tool" ? "tool" : "user",
      toolCallIds: turn.spec.gapKind === "tool" && prev ? [prev] : [],
    },
    stored: null,
    tenant: null,
  };
}

export interface FinishedArgs {
  turn: Turn;
  result: TurnResult;
  nowMs: number;
  pageSize: number;
  /** The session's chain before this turn, on the same worker (empty: none). */
  prevChain: readonly bigint[];
  model: string;
  deviceBlocks: number | null;
}

export function turnFinished(a: FinishedArgs): Observation {
  const { turn, result } = a;
  const promptLen = turn.prepared.promptLen;
  const outLen = turn.prepared.output.length;
  const history = Math.min(commonPrefix(a.prevChain, result.chain) * a.pageSize, promptLen);
  const reasoning = Math.min(turn.spec.reasoningTokens, outLen);
  const marker = turn.spec.cacheMarker;
  return {
    type: "TurnFinished",
    at: a.nowMs,
    requestId: turn.rid,
    sessionId: turn.session,
    route: "chat",
    worker: turn.worker as string,
    status: 200,
    error: null,
    finishReason: callsTool(turn) ? "tool_calls" : "stop",
    usage: { promptTokens: promptLen, completionTokens: outLen, cachedTokens: result.cachedTokens },
    promptTokens: ids(promptLen),
    outputTokens: ids(outLen),
    chain: Array.from(result.chain),
    ranges: {
      system: null,
      history: { start: 0, end: history },
      prompt: { start: history, end: promptLen },
      reasoning: reasoning > 0 ? { start: promptLen, end: promptLen + reasoning } : null,
      output: { start: promptLen, end: promptLen + outLen },
    },
    toolCalls: toolCalls(turn),
    durationMs: a.nowMs - turn.arrival * 1000,
    cacheMarkers: marker
      ? {
          breakpoints: [{ tokens: marker.tokens, ttlSeconds: marker.ttlS, at: "system" }],
          errors: [],
        }
      : null,
    model: a.model,
    workerDeviceBlocks: a.deviceBlocks,
  };
}
