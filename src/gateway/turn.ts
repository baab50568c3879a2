// One inference request through the gateway: session id, prompt hashes (when the index has
// anything to match them against), the routing decision, then the worker call (worker-call.ts)
// and, off the client's path, the turn's record (turn-record.ts).
import type { IncomingMessage, ServerResponse } from "node:http";
import type { OverlapResult } from "../index/index.js";
import { promptTailOf } from "../policy/prompt-tail.js";
import { type HashNamespace, namespaceOf, requestBlockHashes } from "./block-hashes.js";
import { errorBody } from "./errors.js";
import { sendJson } from "./inference-front.js";
import type { RouteKind } from "./observations.js";
import { NoWorkerError, routeRequest, type RouteDecision } from "./router.js";
import { SessionIdError, type SessionIdSource, sessionIdOf } from "./session-id.js";
import { promptTokensInRequest, tokenizeOn, tokenizeRequestFor } from "./token-truth.js";
import { flavorOf, isObject, type ParsedBody, type TurnContext } from "./turn-context.js";
import { headerHints } from "./turn-hints.js";
import { finishTurn, mayCarryMarkers } from "./turn-record.js";
import { ClientLink, callWorker } from "./worker-call.js";
import type { GatewayWorker } from "./workers.js";

export type { ParsedBody, TurnContext } from "./turn-context.js";

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

export async function serveTurn(ctx: TurnContext, route: RouteKind, req: IncomingMessage, res: ServerResponse, parsed: ParsedBody): Promise<void> {
  const { metrics, config, clock } = ctx;
  const flavor = flavorOf(route);
  const fail = (status: number, type: string, message: string, param: string | null = null) => sendJson(res, status, errorBody(flavor, type, message, param));
  if (!isObject(parsed.json)) {
    metrics.badRequests.inc({ reason: "not_object" });
    metrics.countRequest(route, "none", 400);
    return fail(400, "invalid_request_error", "request body must be a JSON object");
  }
  const body = parsed.json;
  if (body.stream !== undefined && typeof body.stream !== "boolean") {
    metrics.badRequests.inc({ reason: "bad_field" });
    metrics.countRequest(route, "none", 400);
    return fail(400, "invalid_request_error", "stream must be a boolean", "stream");
  }
  const stream = body.stream === true;
  let sid: SessionIdSource | null;
  try {
    sid = sessionIdOf(req.headers, body);
  } catch (e) {
    if (!(e instanceof SessionIdError)) throw e;
    metrics.badRequests.inc({ reason: "bad_session_id" });
    metrics.countRequest(route, "none", 400);
    return fail(400, "invalid_request_error", e.message, e.field);
  }
  for (const k of ["cache_salt", "extra_key"]) {
    if (body[k] !== undefined && body[k] !== null && typeof body[k] !== "string") {
      metrics.badRequests.inc({ reason: "bad_field" });
      metrics.countRequest(route, "none", 400);
      return fail(400, "invalid_request_error", `${k} must be a string`, k);
    }
  }
  const started = clock.now();
  const requestId = ctx.nextRequestId();
  if (sid) await ctx.recording.get(sid.id);
  const session = sid ? await ctx.sessions.get(sid.id) : null;
  const ns = namespaceOf(body);
  for (const h of headerHints(ctx, req.headers, sid?.id ?? null, session !== null)) ctx.observe(h);

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

  const client = new ClientLink(res);

  // At most three tries: a worker that refuses the connection has seen nothing of the request, so
  // the request goes to the next choice (and the refusing worker is drained); a connection reset
  // before any answer sends it again (the worker may have died: the next try finds out).
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
      metrics.countRequest(route, "none", 503);
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
    let outcome = await callWorker(ctx, route, worker, req.headers, res, parsed, body, stream, client, promptTokens?.length ?? 0);
    if (outcome.kind === "retry" && attempt < 2 && ctx.workers.available().length > 0) continue;
    if (outcome.kind === "retry") {
      metrics.countRequest(route, worker.id, 502);
      fail(502, "upstream_error", `worker ${worker.id} failed before answering (${outcome.error})`);
      outcome = { kind: "done", status: 0, error: outcome.error, result: null };
    }
    // The turn's record is kept after the response went out (off the client's path).
    const recording = finishTurn(ctx, { route, worker, requestId, sid, session, body, ns, promptTokens, tokenizeReq, started, outcome, markers: mayCarryMarkers(parsed.raw) }).catch((e) =>
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
