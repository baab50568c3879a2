// One inference request through the gateway: session id, prompt hashes (when the index has
// anything to match them against), routing decision, the worker call (streamed through with
// backpressure, or whole), then the turn's record: token ids from the worker, block hashes in its
// scheme, session update, observations for the policy.
import { PassThrough } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { KvIndex, OverlapResult } from "../index/index.js";
import { type HashNamespace, namespaceOf, requestBlockHashes } from "./block-hashes.js";
import type { GatewayConfig } from "./config.js";
import { type ApiFlavor, errorBody, streamErrorEvent } from "./errors.js";
import type { GatewayMetrics } from "./metrics.js";
import type { Observation, RouteKind, TurnRanges } from "./observations.js";
import { NoWorkerError, routeRequest, type RouteDecision } from "./router.js";
import { SessionIdError, type SessionIdSource, sessionIdOf } from "./session-id.js";
import type { SessionRecord, TurnSummary } from "./session-record.js";
import { MAX_TURNS_KEPT } from "./session-record.js";
import type { Clock, SessionStore } from "./session-store.js";
import {
  promptTokensInRequest,
  stripTokenFields,
  type TokenFieldsAdded,
  tokenizeOn,
  tokenizeRequestFor,
  type TurnResult,
  turnResultOf,
  usageOf,
  withTokenIds,
} from "./token-truth.js";
import { HINT_HEADER, HintError, parseHintHeader } from "../policy/hints.js";
import { parseCacheMarkers, prefixTokenizeRequest } from "../policy/markers.js";
import { promptTailOf } from "../policy/prompt-tail.js";
import type { CacheMarkers, SessionHint } from "./observations.js";
import { classifyUpstreamError } from "./upstream.js";
import type { GatewayWorker, WorkerSet } from "./workers.js";

export interface ParsedBody {
  raw: Buffer;
  json: unknown;
}

export interface TurnContext {
  config: GatewayConfig;
  workers: WorkerSet;
  index: KvIndex;
  sessions: SessionStore;
  metrics: GatewayMetrics;
  clock: Clock;
  observe: (o: Observation) => void;
  decisionLog: ((line: string) => void) | null;
  log: (line: string) => void;
  rand: () => number;
  nextRequestId: () => string;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  recording: Map<string, Promise<void>>;
}

const PATHS: Record<RouteKind, string> = {
  chat: "/v1/chat/completions",
  completions: "/v1/completions",
  messages: "/v1/messages",
  generate: "/generate",
};

// Hop-by-hop and framing headers are the gateway's own business on each leg.
const DROP_REQUEST_HEADERS = new Set(["host", "connection", "content-length", "transfer-encoding", "keep-alive", "upgrade", "expect", "te", "proxy-connection"]);
const PASS_RESPONSE_HEADERS = ["content-type", "cache-control", "x-request-id"];

function forwardHeaders(req: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || DROP_REQUEST_HEADERS.has(k)) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  out["content-type"] = "application/json";
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function flavorOf(route: RouteKind): ApiFlavor {
  return route === "messages" ? "anthropic" : "openai";
}

/** Overlap of the prompt per worker, each worker scored on hashes in its own scheme. */
function overlapFor(ctx: TurnContext, workers: readonly GatewayWorker[], tokens: number[], ns: HashNamespace): { overlap: OverlapResult | null; hashes: Map<GatewayWorker, bigint[]> } {
  const hashes = new Map<GatewayWorker, bigint[]>();
  const byScheme = new Map<string, { hashes: BigInt64Array; overlap: OverlapResult }>();
  let merged: OverlapResult | null = null;
  for (const w of workers) {
    if (!w.scheme) continue;
    const key = `${w.scheme.pageSize}/${w.scheme.eventFormat}/${w.scheme.bigram}`;
    let s = byScheme.get(key);
    if (!s) {
      const h = requestBlockHashes(tokens, w.scheme, ns);
      s = { hashes: h, overlap: ctx.index.overlap(h) };
      byScheme.set(key, s);
    }
    hashes.set(w, Array.from(s.hashes));
    if (!merged) merged = { requestBlocks: s.overlap.requestBlocks, workers: new Map(), shared: s.overlap.shared };
    const o = s.overlap.workers.get(w.id);
    if (o) merged.workers.set(w.id, o);
  }
  return { overlap: merged, hashes };
}

function commonPrefix(a: readonly string[], b: readonly string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

export async function serveTurn(ctx: TurnContext, route: RouteKind, req: FastifyRequest, reply: FastifyReply): Promise<void> {
  const { metrics, config, clock } = ctx;
  const flavor = flavorOf(route);
  const parsed = req.body as ParsedBody | undefined;
  const fail = (status: number, type: string, message: string, param: string | null = null) => {
    reply.code(status).header("content-type", "application/json").send(errorBody(flavor, type, message, param));
  };
  if (!parsed || !isObject(parsed.json)) {
    metrics.badRequests.inc({ reason: "not_object" });
    metrics.requests.inc({ route, worker: "none", status: 400 });
    return fail(400, "invalid_request_error", "request body must be a JSON object");
  }
  const body = parsed.json;
  if (body.stream !== undefined && typeof body.stream !== "boolean") {
    metrics.badRequests.inc({ reason: "bad_field" });
    metrics.requests.inc({ route, worker: "none", status: 400 });
    return fail(400, "invalid_request_error", "stream must be a boolean", "stream");
  }
  const stream = body.stream === true;
  let sid: SessionIdSource | null;
  try {
    sid = sessionIdOf(req.headers, body);
  } catch (e) {
    if (!(e instanceof SessionIdError)) throw e;
    metrics.badRequests.inc({ reason: "bad_session_id" });
    metrics.requests.inc({ route, worker: "none", status: 400 });
    return fail(400, "invalid_request_error", e.message, e.field);
  }
  for (const k of ["cache_salt", "extra_key"]) {
    if (body[k] !== undefined && body[k] !== null && typeof body[k] !== "string") {
      metrics.badRequests.inc({ reason: "bad_field" });
      metrics.requests.inc({ route, worker: "none", status: 400 });
      return fail(400, "invalid_request_error", `${k} must be a string`, k);
    }
  }
  const started = clock.now();
  const requestId = ctx.nextRequestId();
  if (sid) await ctx.recording.get(sid.id);
  const session = sid ? await ctx.sessions.get(sid.id) : null;
  const ns = namespaceOf(body);
  for (const h of headerHints(ctx, req, sid?.id ?? null, session !== null)) ctx.observe(h);

  // Prompt tokens before routing: carried by the request, or from a worker's tokenizer when the
  // index holds blocks to match them against (with an empty index every overlap is zero anyway).
  let promptTokens = promptTokensInRequest(route, body);
  const tokenizeReq = tokenizeRequestFor(route, body);
  let available = ctx.workers.available();
  if (!promptTokens && tokenizeReq && config.routing.tokenize === "auto" && available.length > 1 && ctx.index.stats().blocks > 0) {
    const w = available.reduce((a, b) => (b.inFlight < a.inFlight ? b : a));
    try {
      promptTokens = await tokenizeOn(w.pool, tokenizeReq, config.health.timeoutMs * 5);
    } catch (e) {
      ctx.log(`gateway: tokenize on ${w.id} before routing failed (${(e as Error).message}); routing without prompt hashes`);
    }
  }
  const { overlap, hashes } = promptTokens ? overlapFor(ctx, available, promptTokens, ns) : { overlap: null, hashes: new Map<GatewayWorker, bigint[]>() };

  const abort = new AbortController();
  let clientGone = false;
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) {
      clientGone = true;
      abort.abort();
    }
  });

  // At most two tries: a worker that refuses the connection has seen nothing of the request, so
  // the request goes to the next choice (and the refusing worker is drained).
  for (let attempt = 0; ; attempt++) {
    available = ctx.workers.available();
    let decision: RouteDecision;
    try {
      decision = routeRequest(
        {
          workers: available.map((w) => w.state()),
          overlap,
          session: session ? { worker: session.worker, lastActivityMs: session.lastActivityMs } : null,
          nowMs: clock.now(),
        },
        config.routing,
        ctx.rand,
      );
    } catch (e) {
      if (!(e instanceof NoWorkerError)) throw e;
      metrics.requests.inc({ route, worker: "none", status: 503 });
      return fail(503, "service_unavailable", e.message);
    }
    const worker = ctx.workers.get(decision.worker) as GatewayWorker;
    metrics.decisions.inc({ worker: worker.id, reason: decision.reason });
    ctx.decisionLog?.(
      JSON.stringify({
        ts: new Date(clock.now()).toISOString(),
        event: "route",
        request_id: requestId,
        route,
        stream,
        session: sid?.id ?? null,
        session_from: sid?.from ?? null,
        worker: worker.id,
        reason: decision.reason,
        session_moved: decision.sessionMoved,
        match_rate: decision.matchRate,
        request_blocks: overlap?.requestBlocks ?? null,
        overlap: decision.overlap,
        in_flight: Object.fromEntries(available.map((w) => [w.id, w.inFlight])),
        attempt,
      }),
    );
    const promptBlocks = hashes.get(worker) ?? null;
    ctx.observe({
      type: "TurnStarted",
      at: clock.now(),
      requestId,
      sessionId: sid?.id ?? null,
      route,
      stream,
      worker: worker.id,
      reason: decision.reason,
      promptBlocks,
      overlap: decision.overlap,
      model: typeof body.model === "string" ? body.model : null,
      tail: promptTailOf(route, body),
      stored: session ? { worker: session.worker, pins: session.pins, leases: session.leases, tool: session.tool } : null,
    });
    let outcome = await callWorker(ctx, route, worker, req, reply, parsed, body, stream, abort.signal, () => clientGone, promptTokens?.length ?? 0);
    if (outcome.kind === "retry" && attempt === 0 && ctx.workers.available().length > 0) continue;
    if (outcome.kind === "retry") {
      metrics.requests.inc({ route, worker: worker.id, status: 502 });
      fail(502, "upstream_error", `worker ${worker.id} refused the connection: ${outcome.error}`);
      outcome = { kind: "done", status: 0, error: outcome.error, result: null };
    }
    // The turn's record is kept after the response went out (off the client's path).
    const recording = finishTurn(ctx, { route, worker, requestId, sid, session, body, ns, promptTokens, tokenizeReq, started, outcome }).catch((e) =>
      ctx.log(`gateway: recording turn ${requestId} failed: ${(e as Error).message}`),
    );
    if (sid) {
      ctx.recording.set(sid.id, recording);
      void recording.finally(() => {
        if (ctx.recording.get(sid.id) === recording) ctx.recording.delete(sid.id);
      });
    }
    return;
  }
}

interface DoneOutcome {
  kind: "done";
  status: number;
  error: string | null;
  result: TurnResult | null;
}
type CallOutcome = DoneOutcome | { kind: "retry"; error: string };

async function callWorker(
  ctx: TurnContext,
  route: RouteKind,
  worker: GatewayWorker,
  req: FastifyRequest,
  reply: FastifyReply,
  parsed: ParsedBody,
  body: Record<string, unknown>,
  stream: boolean,
  signal: AbortSignal,
  clientGone: () => boolean,
  promptTokenCount: number,
): Promise<CallOutcome> {
  const { metrics } = ctx;
  const flavor = flavorOf(route);
  let added: TokenFieldsAdded | null = null;
  let raw = parsed.raw;
  if (!stream && (route === "chat" || route === "completions")) ({ raw, added } = withTokenIds(route, parsed.raw, body));
  worker.inFlight++;
  worker.inFlightPromptTokens += promptTokenCount;
  metrics.inFlight.set({ worker: worker.id }, worker.inFlight);
  const endTimer = metrics.duration.startTimer({ route });
  const done = () => {
    worker.inFlight--;
    worker.inFlightPromptTokens -= promptTokenCount;
    metrics.inFlight.set({ worker: worker.id }, worker.inFlight);
    endTimer();
  };
  let res;
  try {
    res = await worker.pool.request({ method: "POST", path: PATHS[route], headers: forwardHeaders(req), body: raw, signal });
  } catch (e) {
    done();
    return upstreamFailed(ctx, route, worker, reply, e, clientGone(), flavor);
  }
  const status = res.statusCode;
  const contentType = String(res.headers["content-type"] ?? "");
  const isSse = contentType.includes("text/event-stream");
  reply.code(status);
  reply.header("x-kvctl-worker", worker.id);
  for (const h of PASS_RESPONSE_HEADERS) {
    const v = res.headers[h];
    if (v !== undefined) reply.header(h, Array.isArray(v) ? v.join(", ") : v);
  }
  if (!isSse) {
    let buf: Buffer;
    try {
      buf = Buffer.from(await res.body.arrayBuffer());
    } catch (e) {
      done();
      reply.removeHeader("content-type");
      return upstreamFailed(ctx, route, worker, reply, e, clientGone(), flavor);
    }
    done();
    let result: TurnResult | null = null;
    let out: Buffer | string = buf;
    if (status === 200 && contentType.includes("json")) {
      const text = buf.toString("utf8");
      let json: unknown = null;
      try {
        json = JSON.parse(text);
      } catch {
        json = null;
      }
      result = turnResultOf(route, json);
      if (added && (added.prompt || added.response)) out = stripTokenFields(text, added);
    }
    metrics.requests.inc({ route, worker: worker.id, status });
    reply.send(out);
    return { kind: "done", status, error: null, result };
  }

  // Streaming: bytes go to the client as they come; a full client buffer pauses the worker's
  // stream (backpressure). The scan only looks for the closing usage/finish_reason.
  const pass = new PassThrough();
  const scan = new StreamScan(route);
  const upstream = res.body;
  return await new Promise<CallOutcome>((resolve) => {
    let settled = false;
    const finish = (o: DoneOutcome) => {
      if (settled) return;
      settled = true;
      done();
      metrics.requests.inc({ route, worker: worker.id, status: o.error ? 502 : status });
      resolve(o);
    };
    upstream.on("data", (chunk: Buffer) => {
      scan.push(chunk);
      if (!pass.destroyed && !pass.write(chunk)) upstream.pause();
    });
    pass.on("drain", () => upstream.resume());
    upstream.on("end", () => {
      pass.end();
      finish({ kind: "done", status, error: null, result: scan.result() });
    });
    upstream.on("error", (e: Error) => {
      if (clientGone()) {
        metrics.clientAborts.inc({ route });
        pass.destroy();
        finish({ kind: "done", status, error: "client disconnected", result: null });
        return;
      }
      const kind = classifyUpstreamError(e);
      metrics.upstreamErrors.inc({ worker: worker.id, kind });
      if (kind === "reset" || kind === "connect") ctx.workers.drain(worker, `its stream broke: ${e.message}`);
      ctx.log(`gateway: worker ${worker.id} failed mid-stream (${kind}: ${e.message}); client told`);
      pass.end(streamErrorEvent(flavor, "upstream_error", `worker ${worker.id} failed mid-stream (${kind}); retry the request`));
      finish({ kind: "done", status, error: `worker failed mid-stream: ${e.message}`, result: null });
    });
    reply.send(pass);
  });
}

function upstreamFailed(ctx: TurnContext, route: RouteKind, worker: GatewayWorker, reply: FastifyReply, e: unknown, clientGone: boolean, flavor: ApiFlavor): CallOutcome {
  const { metrics } = ctx;
  if (clientGone) {
    metrics.clientAborts.inc({ route });
    metrics.requests.inc({ route, worker: worker.id, status: 499 });
    return { kind: "done", status: 0, error: "client disconnected", result: null };
  }
  const kind = classifyUpstreamError(e);
  metrics.upstreamErrors.inc({ worker: worker.id, kind });
  if (kind === "connect") {
    ctx.workers.drain(worker, `connection refused: ${(e as Error).message}`);
    return { kind: "retry", error: (e as Error).message };
  }
  if (kind === "reset") ctx.workers.drain(worker, `connection reset: ${(e as Error).message}`);
  const status = kind === "timeout" ? 504 : 502;
  const msg = kind === "timeout" ? `worker ${worker.id} timed out` : `worker ${worker.id} failed: ${(e as Error).message}`;
  metrics.requests.inc({ route, worker: worker.id, status });
  reply.code(status).header("content-type", "application/json").send(errorBody(flavor, kind === "timeout" ? "upstream_timeout" : "upstream_error", msg));
  return { kind: "done", status, error: msg, result: null };
}

/** Watches SSE bytes for the finish reason and usage (the last events), without holding them up. */
class StreamScan {
  private tail = "";
  private finishReason: string | null = null;
  private usage: unknown = null;
  private outputIds: number[] = [];
  constructor(private readonly route: RouteKind) {}

  push(chunk: Buffer): void {
    this.tail += chunk.toString("utf8");
    let nl: number;
    while ((nl = this.tail.indexOf("\n")) >= 0) {
      const line = this.tail.slice(0, nl);
      this.tail = this.tail.slice(nl + 1);
      if (!line.startsWith("data:") || !line.includes('"')) continue;
      if (!line.includes("finish_reason") && !line.includes("usage") && !line.includes("stop_reason") && !line.includes("meta_info")) continue;
      let ev: Record<string, unknown>;
      try {
        ev = JSON.parse(line.slice(5));
      } catch {
        continue;
      }
      if (ev.usage) this.usage = ev.usage;
      const choice = Array.isArray(ev.choices) ? (ev.choices[0] as Record<string, unknown>) : null;
      if (typeof choice?.finish_reason === "string") this.finishReason = choice.finish_reason;
      const delta = ev.delta as Record<string, unknown> | undefined;
      if (typeof delta?.stop_reason === "string") this.finishReason = delta.stop_reason;
      if (this.route === "generate" && isObject(ev.meta_info)) {
        const fr = ev.meta_info.finish_reason as { type?: string } | null;
        if (fr && typeof fr.type === "string") this.finishReason = fr.type;
        const meta = ev.meta_info;
        this.usage = { prompt_tokens: meta.prompt_tokens, completion_tokens: meta.completion_tokens, prompt_tokens_details: { cached_tokens: meta.cached_tokens } };
        if (Array.isArray(ev.output_ids)) this.outputIds = ev.output_ids as number[];
      }
    }
  }

  result(): TurnResult {
    return {
      promptTokens: null,
      outputTokens: this.route === "generate" && this.outputIds.length ? this.outputIds : null,
      finishReason: this.finishReason,
      usage: usageOf(this.usage),
      toolCalls: [],
      reasoningText: null,
    };
  }
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
      const sys = await tokenizeOn(worker.pool, req, ctx.config.health.timeoutMs * 5);
      n = sys.length <= prompt.length && sys.every((t, i) => t === prompt[i]) ? sys.length : null;
    } catch {
      n = null;
    }
    if (systemLengths.size >= 1024) systemLengths.delete(systemLengths.keys().next().value as string);
    systemLengths.set(key, n);
  }
  return n === null ? null : { start: 0, end: n };
}

/** The x-kvctl-hint header as observations; a bad one is counted and logged, the request still served. */
function headerHints(ctx: TurnContext, req: FastifyRequest, sessionId: string | null, known: boolean): SessionHint[] {
  const v = req.headers[HINT_HEADER];
  const value = Array.isArray(v) ? v.join(",") : v;
  if (value === undefined || value.trim() === "") return [];
  if (sessionId === null) {
    ctx.metrics.hints.inc({ event: "header", outcome: "no_session" });
    ctx.log(`gateway: ${HINT_HEADER} on a request with no session id (ignored)`);
    return [];
  }
  let hints: SessionHint[];
  try {
    hints = parseHintHeader(value, sessionId, ctx.clock.now());
  } catch (e) {
    if (!(e instanceof HintError)) throw e;
    ctx.metrics.hints.inc({ event: "header", outcome: "invalid" });
    ctx.log(`gateway: session ${JSON.stringify(sessionId)}: ${e.message} (ignored)`);
    return [];
  }
  for (const h of hints) ctx.metrics.hints.inc({ event: h.event, outcome: known ? "accepted" : "unknown_session" });
  return known ? hints : [];
}

/** Token positions of the request's prompt-cache markers, from the worker's tokenizer. */
async function cacheMarkersOf(ctx: TurnContext, worker: GatewayWorker, route: RouteKind, body: Record<string, unknown>, prompt: number[]): Promise<CacheMarkers | null> {
  const pins = ctx.config.policies?.pins;
  const parsed = parseCacheMarkers(route, body, { inMemoryTtlSeconds: pins?.inMemoryTtlSeconds ?? 600, longTtlSeconds: pins?.longTtlSeconds ?? 86_400 });
  if (!parsed) return null;
  const out: CacheMarkers = { breakpoints: [], errors: parsed.errors };
  for (const spec of parsed.specs) {
    const req = prefixTokenizeRequest(route, body, spec);
    if (!req) {
      if (spec.messages === null || spec.messages >= (Array.isArray(body.messages) ? body.messages.length : 0)) out.breakpoints.push({ tokens: prompt.length, ttlSeconds: spec.ttlSeconds, at: spec.at });
      continue;
    }
    try {
      const t = await tokenizeOn(worker.pool, req, ctx.config.health.timeoutMs * 5);
      let n = 0;
      while (n < t.length && n < prompt.length && t[n] === prompt[n]) n++;
      out.breakpoints.push({ tokens: n, ttlSeconds: spec.ttlSeconds, at: spec.at });
    } catch (e) {
      ctx.log(`gateway: tokenize for the cache marker at ${spec.at} on ${worker.id} failed: ${(e as Error).message} (marker skipped)`);
    }
  }
  return out;
}

interface FinishArgs {
  route: RouteKind;
  worker: GatewayWorker;
  requestId: string;
  sid: SessionIdSource | null;
  session: SessionRecord | null;
  body: Record<string, unknown>;
  ns: HashNamespace;
  promptTokens: number[] | null;
  tokenizeReq: Record<string, unknown> | null;
  started: number;
  outcome: DoneOutcome;
}

async function finishTurn(ctx: TurnContext, a: FinishArgs): Promise<void> {
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
        const n = (await tokenizeOn(worker.pool, { prompt: r.reasoningText, add_special_tokens: false }, ctx.config.health.timeoutMs * 5)).length;
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
    cacheMarkers: prompt && outcome.status === 200 && worker.healthy ? await cacheMarkersOf(ctx, worker, a.route, a.body, prompt) : null,
    model: typeof a.body.model === "string" ? a.body.model : null,
  });
}
