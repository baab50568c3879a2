// After the answer went out: the turn's token ids (from the worker), block hashes in the worker's
// scheme, token ranges, the session record update and the TurnFinished observation.
import type { TokenizeCall } from "../request/tokenize-call.js";
import type { TurnSession, TurnWorker } from "./ports.js";
import type { TurnRequest } from "../request/shapes.js";
import type { TurnFinished, TurnRanges, Usage } from "../../contract/observations.js";
import { requestBlockHashes } from "../workers/block-hashes.js";
import { MAX_TURNS_KEPT, type TurnSummary } from "../sessions/holds/record.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "./turn-deps.js";
import { cacheMarkersOf } from "./turn-hints.js";
import type { DoneOutcome } from "./call.js";

export interface FinishArgs {
  turn: TurnRequest;
  worker: TurnWorker;
  requestId: string;
  /** The session record as the turn found it. */
  session: TurnSession | null;
  /** Prompt ids known before routing (carried by the request or tokenized for routing). */
  promptTokens: number[] | null;
  started: number;
  outcome: DoneOutcome;
}

/** The token sequence of a finished turn and its block hashes in the worker's scheme. */
interface Tokens {
  prompt: number[] | null;
  output: number[] | null;
  /** prompt + output, the sequence the worker's cache now holds (null while its scheme is unknown: nothing hashes it). */
  seq: number[] | null;
  chain: bigint[];
  /** chain as the session record keeps it (decimal strings). */
  chainStr: string[];
}

export const NO_USAGE: Usage = { promptTokens: null, completionTokens: null, cachedTokens: null };

/** What a turn's end says beyond which turn it was: its answer, as far as there was one. */
export type TurnEnd = Pick<TurnFinished, "status" | "error"> &
  Partial<
    Pick<
      TurnFinished,
      | "finishReason"
      | "usage"
      | "promptTokens"
      | "outputTokens"
      | "chain"
      | "ranges"
      | "toolCalls"
      | "cacheMarkers"
      | "workerDeviceBlocks"
    >
  >;

/** The one place a TurnFinished is built: a try of `turn` on `worker`, ended at `at`. */
export function turnFinished(
  turn: TurnRequest,
  requestId: string,
  worker: string,
  started: number,
  at: number,
  end: TurnEnd,
): TurnFinished {
  const o: TurnFinished = {
    type: "TurnFinished",
    at,
    requestId,
    sessionId: turn.session?.id ?? null,
    tenant: turn.tenant,
    route: turn.route,
    worker,
    status: end.status,
    error: end.error,
    finishReason: end.finishReason ?? null,
    usage: end.usage ?? NO_USAGE,
    promptTokens: end.promptTokens ?? null,
    outputTokens: end.outputTokens ?? null,
    chain: end.chain ?? [],
    ranges: end.ranges ?? null,
    toolCalls: end.toolCalls ?? [],
    durationMs: at - started,
  };
  if (end.cacheMarkers !== undefined) o.cacheMarkers = end.cacheMarkers;
  o.model = turn.model;
  if (end.workerDeviceBlocks !== undefined) o.workerDeviceBlocks = end.workerDeviceBlocks;
  return o;
}

export async function finishTurn(deps: TurnDeps, tel: Telemetry, a: FinishArgs): Promise<void> {
  const { worker, outcome } = a;
  const r = outcome.result;
  if (r?.usage.cachedTokens != null)
    tel.metrics.cachedTokens.inc({ worker: worker.id }, r.usage.cachedTokens);
  if (r?.usage.promptTokens != null)
    tel.metrics.promptTokens.inc({ worker: worker.id }, r.usage.promptTokens);
  const t = tokensFrom(
    a,
    a.outcome.result?.promptTokens ?? a.promptTokens ?? (await promptFromWorker(tel, a)),
  );
  const ranges = t.prompt ? await rangesOf(a, t, t.prompt) : null;
  const now = tel.clock.now();
  if (a.turn.session && outcome.status === 200)
    await saveTurn(deps, a.turn.session.id, a, t, ranges, now);
  const markers =
    a.turn.markers && t.prompt && outcome.status === 200 && worker.healthy
      ? await cacheMarkersOf(tel, worker, a.turn.markers, t.prompt)
      : null;
  deps.observe(
    turnFinished(a.turn, a.requestId, worker.id, a.started, now, {
      status: outcome.status,
      error: outcome.error,
      finishReason: r?.finishReason ?? null,
      usage: r?.usage ?? NO_USAGE,
      promptTokens: t.prompt,
      outputTokens: t.output,
      chain: t.chain,
      ranges,
      toolCalls: r?.toolCalls ?? [],
      cacheMarkers: markers,
      workerDeviceBlocks: worker.events ? (deps.index.stats().workers[worker.id]?.GPU ?? 0) : null,
    }),
  );
}

/** A streamed turn's prompt (its answer carries no ids): the worker tokenizes the same request. */
async function promptFromWorker(tel: Telemetry, a: FinishArgs): Promise<number[] | null> {
  if (!a.outcome.result || a.outcome.status !== 200 || !a.turn.tokenize || !a.worker.healthy)
    return null;
  try {
    return await a.worker.tokenizer.prompt(a.turn.tokenize);
  } catch (e) {
    tel.log.warn(
      `gateway: tokenize on ${a.worker.id} for turn ${a.requestId} failed: ${(e as Error).message}`,
      { request_id: a.requestId },
    );
    return null;
  }
}

function tokensFrom(a: FinishArgs, prompt: number[] | null): Tokens {
  const output = a.outcome.result?.outputTokens ?? null;
  const scheme = a.worker.scheme;
  // The joined sequence only matters where it is hashed (a worker whose scheme is known).
  const seq = prompt && scheme ? (output ? prompt.concat(output) : prompt) : null;
  const chain = seq && scheme ? Array.from(requestBlockHashes(seq, scheme, a.turn.namespace)) : [];
  return { prompt, output, seq, chain, chainStr: chain.map(String) };
}

function commonPrefix(a: readonly string[], b: readonly string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

async function rangesOf(a: FinishArgs, t: Tokens, prompt: number[]): Promise<TurnRanges> {
  const { output } = t;
  const prevChain = a.session && a.session.worker !== null ? a.session.chain : [];
  const historyTokens = Math.min(
    commonPrefix(prevChain, t.chainStr) * (a.worker.scheme?.pageSize ?? 0),
    prompt.length,
  );
  const reasoningText = a.outcome.result?.reasoningText;
  const reasoning =
    reasoningText && output && a.worker.healthy
      ? await reasoningRange(a.worker, reasoningText, prompt, output)
      : null;
  return {
    system: a.turn.systemTokenize
      ? await systemRange(a.worker, a.turn.systemTokenize, prompt)
      : null,
    history: { start: 0, end: historyTokens },
    prompt: { start: historyTokens, end: prompt.length },
    reasoning,
    output: output ? { start: prompt.length, end: prompt.length + output.length } : null,
  };
}

async function reasoningRange(
  worker: TurnWorker,
  reasoningText: string,
  prompt: number[],
  output: number[],
): Promise<TurnRanges["reasoning"]> {
  try {
    const n = await worker.tokenizer.textLength(reasoningText);
    return {
      start: prompt.length,
      end: Math.min(prompt.length + n, prompt.length + output.length),
    };
  } catch {
    return null;
  }
}

/** Where the system prompt (and tools) ends in the prompt, as the worker's tokenizer says. */
async function systemRange(
  worker: TurnWorker,
  call: TokenizeCall,
  prompt: number[],
): Promise<TurnRanges["system"]> {
  const n = await worker.tokenizer.systemLength(call, prompt);
  return n === null ? null : { start: 0, end: n };
}

/** The turn in its session's record: the worker, the chain it holds, and a summary. */
async function saveTurn(
  deps: TurnDeps,
  sessionId: string,
  a: FinishArgs,
  t: Tokens,
  ranges: TurnRanges | null,
  now: number,
): Promise<void> {
  const r = a.outcome.result;
  const summary: TurnSummary = {
    n: 0,
    worker: a.worker.id,
    route: a.turn.route,
    startedMs: a.started,
    finishedMs: now,
    status: a.outcome.status,
    finishReason: r?.finishReason ?? null,
    usage: r?.usage ?? NO_USAGE,
    ranges,
    promptBlocks:
      t.prompt && a.worker.scheme ? Math.floor(t.prompt.length / a.worker.scheme.pageSize) : 0,
    totalBlocks: t.chain.length,
    toolCalls: r?.toolCalls ?? [],
  };
  await deps.sessions.update(sessionId, (rec) => {
    // The first turn's tenant owns the session (auth/ownership.ts).
    if (rec.turnCount === 0 && a.turn.tenant !== null) rec.tenant = a.turn.tenant;
    rec.worker = a.worker.id;
    if (t.chain.length) {
      rec.chain = t.chainStr;
      rec.frontierTokens = t.seq?.length ?? 0;
    }
    rec.turnCount++;
    summary.n = rec.turnCount;
    rec.turns.push(summary);
    if (rec.turns.length > MAX_TURNS_KEPT) rec.turns.splice(0, rec.turns.length - MAX_TURNS_KEPT);
    rec.lastActivityMs = now;
  });
}
