// The worker routes an SDK calls besides the four inference routes, passed through unchanged: the
// request's bytes and Content-Type go to one worker chosen by the same rules as a turn (a live
// session's worker, else the least loaded; nothing to hash), and its answer comes back byte for
// byte, streamed when it streams. A stored response (/v1/responses/{id}) lives on the worker that
// made it and belongs to its tenant (auth/response-owners.ts): the gateway names each new one,
// sends a by-id request to that worker alone, and answers another tenant's id as an unknown one.
// docs/routes.md lists every route.
import type { TurnWorker } from "../turn/ports.js";
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Dispatcher } from "undici";
import { passHeaders } from "../turn/answer-relay.js";
import { errorBody } from "../core/errors.js";
import { isObject } from "../core/json-shape.js";
import { flavorOfRequest } from "../request/routes.js";
import { streamOf } from "../request/worker-rules.js";
import { NoWorkerError, routeRequest } from "../workers/router.js";
import { SessionIdError, sessionIdOf } from "../request/session-id.js";
import { callTimeouts } from "../core/timeouts.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "../turn/turn-deps.js";
import { DROP_REQUEST_HEADERS } from "../turn/worker-call.js";
import { saltedBody } from "../auth/cache-isolation.js";
import { principalOf } from "../auth/gate.js";
import { type Caller, scopedSessionId } from "../auth/ownership.js";
import {
  newResponseId,
  ResponseOwners,
  responseNotFound,
  withResponseId,
} from "../auth/response-owners.js";

export interface PassRoute {
  method: "GET" | "POST" | "PUT";
  url: string;
  /** Metrics label. */
  kind: string;
  /** Runs the model (a non-streamed call then waits as a generation does). */
  generates: boolean;
  /** Served by the worker holding the object the path names (its owner's only). */
  owned: boolean;
  /** Creates a stored object, recorded with its tenant and worker (POST /v1/responses). */
  stores: boolean;
}

const route = (
  method: PassRoute["method"],
  url: string,
  kind: string,
  generates = false,
  owned = false,
): PassRoute => ({ method, url, kind, generates, owned, stores: false });

export const PASSTHROUGH_ROUTES: readonly PassRoute[] = [
  route("GET", "/v1/models", "models"),
  route("GET", "/v1/models/*", "models"),
  route("POST", "/v1/messages/count_tokens", "count_tokens"),
  route("POST", "/v1/embeddings", "embeddings", true),
  route("POST", "/v1/rerank", "rerank", true),
  route("PUT", "/v1/rerank", "rerank", true),
  route("POST", "/v1/tokenize", "tokenize"),
  route("POST", "/v1/detokenize", "detokenize"),
  { ...route("POST", "/v1/responses", "responses", true), stores: true },
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

function clientSaltOf(body: Record<string, unknown> | null): string | null {
  return typeof body?.cache_salt === "string" && body.cache_salt !== "" ? body.cache_salt : null;
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

/** Where a request goes, or why it is refused, once the stored objects it names are looked up. */
type Target =
  | { refuse: { status: number; type: string; message: string; param: string | null } }
  | { only: string | "any" | null; raw: Buffer | undefined; creates: string | null };

const notFound = (id: string, param = "response_id"): Target => ({
  refuse: { status: 404, type: "invalid_request_error", message: responseNotFound(id), param },
});

/**
 * The stored responses a request names, checked against the caller: by id in the path (its
 * owner's worker only), as `previous_response_id` (the new response goes where the old one is),
 * and the new response's own id (the client's `request_id`, or one the gateway adds).
 */
function responseTarget(
  owners: ResponseOwners,
  who: Caller,
  r: PassRoute,
  req: FastifyRequest,
  raw: Buffer | undefined,
  body: Record<string, unknown> | null,
): Target {
  if (r.owned) {
    const id = (req.params as { id: string }).id;
    const l = owners.lookup(who, id);
    if (l === "unknown") return notFound(id);
    return { only: l === "any" ? "any" : l.worker, raw, creates: null };
  }
  if (!r.stores || !body || !raw) return { only: null, raw, creates: null };
  let only: string | null = null;
  const prev = body.previous_response_id;
  if (typeof prev === "string") {
    const l = owners.lookup(who, prev);
    if (l === "unknown") return notFound(prev, "previous_response_id");
    if (l !== "any") only = l.worker;
  }
  const own = body.request_id;
  if (typeof own === "string" && !owners.mayName(who, own))
    return {
      refuse: {
        status: 409,
        type: "invalid_request_error",
        message: `request_id '${own}' names a response that already exists`,
        param: "request_id",
      },
    };
  if (own !== undefined) return { only, raw, creates: typeof own === "string" ? own : null };
  const id = newResponseId();
  return { only, raw: withResponseId(raw, body, id), creates: id };
}

/** The workers to ask, in order: the owner's, every available one, or the routed one. */
async function candidates(
  deps: TurnDeps,
  tel: Telemetry,
  only: string | "any" | null,
  req: FastifyRequest,
  body: Record<string, unknown> | null,
): Promise<readonly TurnWorker[]> {
  const available = deps.workers.available();
  if (only === "any" || available.length === 0) return available;
  if (only !== null) return available.filter((w) => w.id === only);
  let session: { worker: string | null; lastActivityMs: number } | null = null;
  try {
    const sid = sessionIdOf(req.headers, body);
    session = sid ? await deps.sessions.get(scopedSessionId(principalOf(req.raw), sid.id)) : null;
  } catch (e) {
    if (!(e instanceof SessionIdError)) throw e;
  }
  const decision = routeRequest(
    { workers: available.map((w) => w.state()), overlap: null, session, nowMs: tel.clock.now() },
    deps.config.routing,
    deps.rand,
  );
  return [deps.workers.get(decision.worker) as TurnWorker];
}

async function forward(
  deps: TurnDeps,
  tel: Telemetry,
  owners: ResponseOwners,
  r: PassRoute,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  const flavor = flavorOfRequest(req.url, req.headers);
  const body = jsonOf(req.body as Buffer | undefined);
  const fail = (status: number, type: string, message: string, param: string | null = null) =>
    reply
      .code(status)
      .header("content-type", "application/json")
      .send(errorBody(flavor, type, message, param));
  const who = principalOf(req.raw);
  const target = responseTarget(owners, who, r, req, req.body as Buffer | undefined, body);
  if ("refuse" in target) {
    const f = target.refuse;
    return fail(f.status, f.type, f.message, f.param);
  }
  const { creates } = target;
  // A new response is generated in its tenant's cache namespace, as a turn is.
  const tenants = deps.auth?.auth.tenants;
  const salted =
    r.stores && target.raw && who.tenant !== null && tenants
      ? saltedBody(target.raw, clientSaltOf(body), tenants.get(who.tenant), tenants.size)
      : null;
  const raw = salted?.raw ?? target.raw;
  const workers = await candidates(deps, tel, target.only, req, body);
  if (workers.length === 0)
    return fail(
      503,
      "service_unavailable",
      new NoWorkerError(
        typeof target.only === "string" && target.only !== "any"
          ? `worker ${target.only}, which holds the response, is not taking traffic`
          : "no worker is taking traffic",
      ).message,
    );
  const timeouts = callTimeouts(
    deps.config.limits,
    r.generates && streamOf("chat", body?.stream) !== true,
  );
  const accepted = (w: string) => {
    if (creates !== null) owners.record(creates, { tenant: who.tenant, worker: w });
  };
  for (const [i, w] of workers.entries()) {
    const last = i === workers.length - 1;
    if (await askWorker(tel, r, req, reply, w, raw, timeouts, { last, accepted }, fail)) return;
  }
}

/**
 * One worker's answer passed back (true), or false when it does not hold the object the path
 * names and another worker is left to ask.
 */
async function askWorker(
  tel: Telemetry,
  r: PassRoute,
  req: FastifyRequest,
  reply: FastifyReply,
  w: TurnWorker,
  raw: Buffer | undefined,
  timeouts: ReturnType<typeof callTimeouts>,
  { last, accepted }: { last: boolean; accepted: (worker: string) => void },
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
    tel.metrics.countRequest(r.kind, w.id, answer.statusCode);
    // The worker took the new object: it is the caller's tenant's, held there.
    if (answer.statusCode < 300) accepted(w.id);
    reply.hijack();
    reply.raw.writeHead(answer.statusCode, passHeaders(w.id, answer.headers));
    await pipeline(answer.body, reply.raw);
  } catch (e) {
    if (reply.sent || reply.raw.headersSent) reply.raw.destroy();
    else {
      tel.metrics.countRequest(r.kind, w.id, 502);
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
  deps: TurnDeps,
  tel: Telemetry,
  bodyLimit: number,
): void {
  const owners = new ResponseOwners();
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", { parseAs: "buffer", bodyLimit }, (_req, raw, done) =>
      done(null, raw),
    );
    for (const r of PASSTHROUGH_ROUTES)
      scope.route({
        method: r.method,
        url: r.url,
        handler: (req, reply) => forward(deps, tel, owners, r, req, reply),
      });
  });
}
