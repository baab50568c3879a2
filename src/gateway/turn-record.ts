// After the answer went out: the turn's token ids (from the worker), block hashes in the worker's
// scheme, token ranges, the session record update and the TurnFinished observation.
import { type HashNamespace, requestBlockHashes } from "./block-hashes.js";
import type { RouteKind, TurnRanges } from "./observations.js";
import type { SessionIdSource } from "./session-id.js";
import { MAX_TURNS_KEPT, type SessionRecord, type TurnSummary } from "./session-record.js";
import { type TokenizeCall, tokenizeCall, tokenizeOn } from "./token-truth.js";
import { cacheMarkersOf } from "./turn-hints.js";
import { isObject, type TurnContext } from "./turn-context.js";
import type { DoneOutcome } from "./worker-call.js";
import type { GatewayWorker } from "./workers.js";

function commonPrefix(a: readonly string[], b: readonly string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

const systemLengths = new Map<string, number | null>();

/**
 * Where the system prompt (and tools) ends: the worker renders the system message alone, and the
 * range holds when those tokens are a prefix of the full prompt (the template is prefix-stable).
 * Remembered per distinct system prompt, so a session pays one tokenize for it.
 */
async function systemRange(ctx: TurnContext, worker: GatewayWorker, body: Record<string, unknown>, prompt: number[]): Promise<TurnRanges["system"]> {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || !isObject(msgs[0]) || msgs[0].role !== "system") return null;
  const req: Record<string, unknown> = { messages: [msgs[0]], add_generation_prompt: false };
  if (body.tools !== undefined) req.tools = body.tools;
  const key = `${worker.id}:${JSON.stringify(req)}`;
  let n = systemLengths.get(key);
  if (n === undefined) {
    try {
      const sys = await tokenizeOn(worker.pool, tokenizeCall(req), ctx.config.health.timeoutMs * 5);
      n = sys.length <= prompt.length && sys.every((t, i) => t === prompt[i]) ? sys.length : null;
    } catch {
      n = null;
    }
    if (systemLengths.size >= 1024) systemLengths.delete(systemLengths.keys().next().value as string);
    systemLengths.set(key, n);
  }
  return n === null ? null : { start: 0, end: n };
}

export interface FinishArgs {
  route: RouteKind;
  worker: GatewayWorker;
  requestId: string;
  sid: SessionIdSource | null;
  session: SessionRecord | null;
  body: Record<string, unknown>;
  ns: HashNamespace;
  promptTokens: number[] | null;
  tokenizeReq: TokenizeCall | null;
  started: number;
  outcome: DoneOutcome;
  /** The body may carry prompt-cache markers (mayCarryMarkers); without them none are looked for. */
  markers: boolean;
}

/**
 * Whether a request body can hold a prompt-cache marker, from its bytes: a key spelled with JSON
 * escapes (the only way to write "cache_control" other than plainly) sends it the long way.
 */
export function mayCarryMarkers(raw: Buffer): boolean {
  return raw.includes("cache_control") || raw.includes("prompt_cache_retention") || raw.includes("\\u");
}

export async function finishTurn(ctx: TurnContext, a: FinishArgs): Promise<void> {
  const { metrics, clock } = ctx;
  const { worker, outcome } = a;
  const r = outcome.result;
  if (r?.usage.cachedTokens != null) metrics.cachedTokens.inc({ worker: worker.id }, r.usage.cachedTokens);
  if (r?.usage.promptTokens != null) metrics.promptTokens.inc({ worker: worker.id }, r.usage.promptTokens);
  let prompt = r?.promptTokens ?? a.promptTokens;
  // Streamed turns (no ids in the answer): the worker tokenizes the same request.
  if (!prompt && r && outcome.status === 200 && a.tokenizeReq && worker.healthy) {
    try {
      prompt = await tokenizeOn(worker.pool, a.tokenizeReq, ctx.config.health.timeoutMs * 5);
    } catch (e) {
      ctx.log(`gateway: tokenize on ${worker.id} for turn ${a.requestId} failed: ${(e as Error).message}`);
    }
  }
  const output = r?.outputTokens ?? null;
  const scheme = worker.scheme;
  const seq = prompt ? (output ? prompt.concat(output) : prompt) : null;
  const chain = seq && scheme ? Array.from(requestBlockHashes(seq, scheme, a.ns)) : [];
  const promptBlocks = prompt && scheme ? Math.floor(prompt.length / scheme.pageSize) : 0;
  const chainStr = chain.map(String);
  let ranges: TurnRanges | null = null;
  if (prompt) {
    const prevChain = a.session && a.session.worker !== null ? a.session.chain : [];
    const historyTokens = Math.min(commonPrefix(prevChain, chainStr) * (scheme?.pageSize ?? 0), prompt.length);
    let reasoning: TurnRanges["reasoning"] = null;
    if (r?.reasoningText && output && worker.healthy) {
      try {
        const n = (await tokenizeOn(worker.pool, tokenizeCall({ prompt: r.reasoningText, add_special_tokens: false }), ctx.config.health.timeoutMs * 5)).length;
        reasoning = { start: prompt.length, end: Math.min(prompt.length + n, prompt.length + output.length) };
      } catch {
        reasoning = null;
      }
    }
    ranges = {
      system: a.route === "chat" ? await systemRange(ctx, worker, a.body, prompt) : null,
      history: { start: 0, end: historyTokens },
      prompt: { start: historyTokens, end: prompt.length },
      reasoning,
      output: output ? { start: prompt.length, end: prompt.length + output.length } : null,
    };
  }
  const now = clock.now();
  if (a.sid && outcome.status === 200) {
    const summary: TurnSummary = {
      n: 0,
      worker: worker.id,
      route: a.route,
      startedMs: a.started,
      finishedMs: now,
      status: outcome.status,
      finishReason: r?.finishReason ?? null,
      usage: r?.usage ?? { promptTokens: null, completionTokens: null, cachedTokens: null },
      ranges,
      promptBlocks,
      totalBlocks: chain.length,
      toolCalls: r?.toolCalls ?? [],
    };
    await ctx.sessions.update(a.sid.id, (rec) => {
      rec.worker = worker.id;
      if (chain.length) {
        rec.chain = chainStr;
        rec.frontierTokens = seq?.length ?? 0;
      }
      rec.turnCount++;
      summary.n = rec.turnCount;
      rec.turns.push(summary);
      if (rec.turns.length > MAX_TURNS_KEPT) rec.turns.splice(0, rec.turns.length - MAX_TURNS_KEPT);
      rec.lastActivityMs = now;
    });
  }
  ctx.observe({
    type: "TurnFinished",
    at: now,
    requestId: a.requestId,
    sessionId: a.sid?.id ?? null,
    route: a.route,
    worker: worker.id,
    status: outcome.status,
    error: outcome.error,
    finishReason: r?.finishReason ?? null,
    usage: r?.usage ?? { promptTokens: null, completionTokens: null, cachedTokens: null },
    promptTokens: prompt,
    outputTokens: output,
    chain,
    ranges,
    toolCalls: r?.toolCalls ?? [],
    durationMs: now - a.started,
    cacheMarkers: a.markers && prompt && outcome.status === 200 && worker.healthy ? await cacheMarkersOf(ctx, worker, a.route, a.body, prompt) : null,
    model: typeof a.body.model === "string" ? a.body.model : null,
    workerDeviceBlocks: worker.events ? (ctx.index.stats().workers[worker.id]?.GPU ?? 0) : null,
  });
}
