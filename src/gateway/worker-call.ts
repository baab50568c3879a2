// The call to the chosen worker: the request bytes (token ids asked for when the answer is not
// streamed), then the answer passed back whole or streamed through with backpressure; a worker
// that fails is told apart (timeout, refused, reset) and drained when it is gone.
import { PassThrough } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import { type ApiFlavor, errorBody, streamErrorEvent } from "./errors.js";
import type { RouteKind } from "./observations.js";
import { StreamScan } from "./stream-scan.js";
import { stripTokenFields, type TokenFieldsAdded, type TurnResult, turnResultOf, withTokenIds } from "./token-truth.js";
import { flavorOf, type ParsedBody, type TurnContext } from "./turn-context.js";
import { classifyUpstreamError } from "./upstream.js";
import type { GatewayWorker } from "./workers.js";

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

export interface DoneOutcome {
  kind: "done";
  status: number;
  error: string | null;
  result: TurnResult | null;
}
export type CallOutcome = DoneOutcome | { kind: "retry"; error: string };

export async function callWorker(
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
