// The worker routes an SDK calls besides the four inference routes, passed through unchanged: the
// request's bytes and Content-Type go to one worker chosen by the same rules as a turn (a live
// session's worker, else the least loaded; nothing to hash), and its answer comes back byte for
// byte, streamed when it streams. A stored response (/v1/responses/{id}) lives on the worker that
// made it: each worker is asked in turn until one knows it. docs/routes.md lists every route.
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Dispatcher } from "undici";
import { passHeaders } from "./answer-relay.js";
import { errorBody } from "./errors.js";
import { isObject } from "./json-shape.js";
import { flavorOfRequest } from "./request/routes.js";
import { streamOf } from "./request/worker-rules.js";
import { NoWorkerError, routeRequest } from "./router.js";
import { SessionIdError, sessionIdOf } from "./session-id.js";
import { callTimeouts } from "./timeouts.js";
import type { TurnContext } from "./turn-context.js";
import { DROP_REQUEST_HEADERS } from "./worker-call.js";
import type { GatewayWorker } from "./workers.js";
import { principalOf } from "./auth/gate.js";
import { scopedSessionId } from "./auth/ownership.js";

export interface PassRoute {
  method: "GET" | "POST" | "PUT";
  url: string;
  /** Metrics label. */
  kind: string;
  /** Runs the model (a non-streamed call then waits as a generation does). */
  generates: boolean;
  /** Served by the worker holding the object the path names (asked in turn). */
  owned: boolean;
}

const route = (
  method: PassRoute["method"],
  url: string,
  kind: string,
  generates = false,
  owned = false,
): PassRoute => ({ method, url, kind, generates, owned });

export const PASSTHROUGH_ROUTES: readonly PassRoute[] = [
  route("GET", "/v1/models", "models"),
  route("GET", "/v1/models/*", "models"),
  route("POST", "/v1/messages/count_tokens", "count_tokens"),
  route("POST", "/v1/embeddings", "embeddings", true),
  route("POST", "/v1/rerank", "rerank", true),
  route("PUT", "/v1/rerank", "rerank", true),
  route("POST", "/v1/tokenize", "tokenize"),
  route("POST", "/v1/detokenize", "detokenize"),
  route("POST", "/v1/responses", "responses", true),
  route("GET", "/v1/responses/:id", "responses", false, true),
  route("POST", "/v1/responses/:id/cancel", "responses", false, true),
];

function upstreamHeaders(req: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k in req.headers) {
    const v = req.headers[k];
    if (v !== undefined && !DROP_REQUEST_HEADERS.has(k))
      out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}

function jsonOf(raw: Buffer | undefined): Record<string, unknown> | null {
  if (!raw || raw.length === 0) return null;
  try {
    const v: unknown = JSON.parse(raw.toString("utf8"));
    return isObject(v) ? v : null;
  } catch {
    return null;
  }
}

/** The workers to ask, in order: every available one for an owned object, else the routed one. */
async function candidates(
  ctx: TurnContext,
  r: PassRoute,
  req: FastifyRequest,
  body: Record<string, unknown> | null,
): Promise<GatewayWorker[]> {
  const available = ctx.workers.available();
  if (r.owned || available.length === 0) return available;
  let session: { worker: string | null; lastActivityMs: number } | null = null;
  try {
    const sid = sessionIdOf(req.headers, body);
    session = sid ? await ctx.sessions.get(scopedSessionId(principalOf(req.raw), sid.id)) : null;
  } catch (e) {
    if (!(e instanceof SessionIdError)) throw e;
  }
  const decision = routeRequest(
    { workers: available.map((w) => w.state()), overlap: null, session, nowMs: ctx.clock.now() },
    ctx.config.routing,
    ctx.rand,
  );
  return [ctx.workers.get(decision.worker) as GatewayWorker];
}

async function forward(
  ctx: TurnContext,
  r: PassRoute,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  const flavor = flavorOfRequest(req.url, req.headers);
  const raw = req.body as Buffer | undefined;
  const body = jsonOf(raw);
  const fail = (status: number, type: string, message: string) =>
    reply
      .code(status)
      .header("content-type", "application/json")
      .send(errorBody(flavor, type, message));
  const workers = await candidates(ctx, r, req, body);
  if (workers.length === 0)
    return fail(
      503,
      "service_unavailable",
      new NoWorkerError("no worker is taking traffic").message,
    );
  const timeouts = callTimeouts(
    ctx.config.limits,
    r.generates && streamOf("chat", body?.stream) !== true,
  );
  for (const [i, w] of workers.entries()) {
    const last = i === workers.length - 1;
    if (await askWorker(ctx, r, req, reply, w, raw, timeouts, last, fail)) return;
  }
}

/**
 * One worker's answer passed back (true), or false when it does not hold the object the path
 * names and another worker is left to ask.
 */
async function askWorker(
  ctx: TurnContext,
  r: PassRoute,
  req: FastifyRequest,
  reply: FastifyReply,
  w: GatewayWorker,
  raw: Buffer | undefined,
  timeouts: ReturnType<typeof callTimeouts>,
  last: boolean,
  fail: (status: number, type: string, message: string) => unknown,
): Promise<boolean> {
  const ac = new AbortController();
  const abort = () => ac.abort(new Error(`worker ${w.id} was drained while answering`));
  const gone = () => {
    if (!reply.raw.writableFinished) ac.abort(new Error("client disconnected"));
  };
  w.calls.add(abort);
  reply.raw.once("close", gone);
  let answer: Dispatcher.ResponseData;
  try {
    answer = await w.pool.request({
      method: r.method,
      path: req.url,
      headers: upstreamHeaders(req),
      body: raw && raw.length > 0 ? raw : undefined,
      signal: ac.signal,
      ...timeouts,
    });
    // Another worker may hold the object this one does not know.
    if (answer.statusCode === 404 && r.owned && !last) {
      await answer.body.dump();
      return false;
    }
    ctx.metrics.countRequest(r.kind, w.id, answer.statusCode);
    reply.hijack();
    reply.raw.writeHead(answer.statusCode, passHeaders(w.id, answer.headers));
    await pipeline(answer.body, reply.raw);
  } catch (e) {
    if (reply.sent || reply.raw.headersSent) reply.raw.destroy();
    else {
      ctx.metrics.countRequest(r.kind, w.id, 502);
      fail(502, "upstream_error", `worker ${w.id} failed: ${(e as Error).message}`);
    }
  } finally {
    w.calls.delete(abort);
    reply.raw.off("close", gone);
  }
  return true;
}

/** Registers the pass-through routes; their bodies are kept as bytes (the worker judges them). */
export function registerPassthrough(
  app: FastifyInstance,
  ctx: TurnContext,
  bodyLimit: number,
): void {
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", { parseAs: "buffer", bodyLimit }, (_req, raw, done) =>
      done(null, raw),
    );
    for (const r of PASSTHROUGH_ROUTES)
      scope.route({
        method: r.method,
        url: r.url,
        handler: (req, reply) => forward(ctx, r, req, reply),
      });
  });
}
