// The call to the chosen worker: the request bytes (token ids asked for when the answer is not
// streamed), then the answer passed back whole or streamed through with backpressure; a worker
// that fails is told apart (timeout, refused, reset) and drained when it is gone. The call is an
// undici dispatch handler writing straight to the client's response: no body stream, no abort
// signal and no intermediate copy per request.
import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import { type Dispatcher, errors as undiciErrors } from "undici";
import type { AdmissionTicket } from "./admission.js";
import { type ApiFlavor, errorBody, streamErrorEvent } from "./errors.js";
import { sendJson } from "./inference-front.js";
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

function forwardHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k in headers) {
    const v = headers[k];
    if (v === undefined || DROP_REQUEST_HEADERS.has(k)) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  out["content-type"] = "application/json";
  return out;
}

function passHeaders(workerId: string, upstream: Record<string, string | string[] | undefined>): Record<string, string | number> {
  const out: Record<string, string | number> = { "x-kvctl-worker": workerId };
  for (const h of PASS_RESPONSE_HEADERS) {
    const v = upstream[h];
    if (v !== undefined) out[h] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}

/** The client's side of a turn: whether it went away, and the worker call to abort when it does. */
export class ClientLink {
  gone = false;
  private abortCall: (() => void) | null = null;
  constructor(res: ServerResponse) {
    res.once("close", () => {
      if (res.writableFinished) return;
      this.gone = true;
      this.abortCall?.();
    });
  }
  /** The abort of the call now under way (aborted at once when the client is already gone). */
  onGone(abort: (() => void) | null): void {
    this.abortCall = abort;
    if (abort && this.gone) abort();
  }
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
  headers: IncomingHttpHeaders,
  res: ServerResponse,
  parsed: ParsedBody,
  body: Record<string, unknown>,
  stream: boolean,
  client: ClientLink,
  promptTokenCount: number,
): Promise<CallOutcome> {
  const { metrics } = ctx;
  const flavor = flavorOf(route);
  let added: TokenFieldsAdded | null = null;
  let raw = parsed.raw;
  if (!stream && (route === "chat" || route === "completions")) ({ raw, added } = withTokenIds(route, parsed.raw, body));
  worker.inFlight++;
  worker.inFlightPromptTokens += promptTokenCount;
  const endTimer = metrics.duration.startTimer({ route });
  // A prompt the gateway did not tokenize is sized from its body (about 4 bytes a token).
  const ticket = worker.gate?.enter(promptTokenCount || Math.ceil(parsed.raw.length / 4)) ?? null;
  let counted = false;
  const done = () => {
    if (counted) return;
    counted = true;
    ticket?.release();
    worker.inFlight--;
    worker.inFlightPromptTokens -= promptTokenCount;
    endTimer();
  };
  if (ticket?.queued && !(await admitted(ctx, worker, ticket, client))) {
    done();
    metrics.clientAborts.inc({ route });
    metrics.countRequest(route, worker.id, 499);
    return { kind: "done", status: 0, error: "client disconnected while waiting for admission", result: null };
  }

  return new Promise<CallOutcome>((resolve) => {
    let status = 0;
    let sse = false;
    let json = false;
    let scan: StreamScan | null = null;
    let answerHeaders: Record<string, string | number> = {};
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (o: CallOutcome) => {
      if (settled) return;
      settled = true;
      client.onGone(null);
      done();
      resolve(o);
    };

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(controller) {
        client.onGone(() => controller.abort(new undiciErrors.RequestAbortedError()));
      },
      onResponseStart(controller, statusCode, upstream) {
        status = statusCode;
        const contentType = String(upstream["content-type"] ?? "");
        sse = contentType.includes("text/event-stream");
        json = contentType.includes("json");
        answerHeaders = passHeaders(worker.id, upstream);
        // Not streamed: sent whole at the end (token fields cut out first).
        if (!sse) return;
        // Streaming: bytes go to the client as they come; a full client buffer pauses the worker's
        // stream (backpressure). The scan only looks for the closing usage/finish_reason.
        scan = new StreamScan(route);
        res.writeHead(status, answerHeaders);
        res.on("drain", () => controller.resume());
      },
      onResponseData(controller, chunk) {
        if (!sse) {
          chunks.push(chunk);
          return;
        }
        scan?.push(chunk);
        if (!res.destroyed && !res.write(chunk)) controller.pause();
      },
      onResponseEnd() {
        if (sse) {
          res.end();
          metrics.countRequest(route, worker.id, status);
          finish({ kind: "done", status, error: null, result: scan?.result() ?? null });
          return;
        }
        done();
        const buf = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        let result: TurnResult | null = null;
        let out: Buffer | string = buf;
        if (status === 200 && json) {
          const text = buf.toString("utf8");
          let parsedAnswer: unknown = null;
          try {
            parsedAnswer = JSON.parse(text);
          } catch {
            parsedAnswer = null;
          }
          result = turnResultOf(route, parsedAnswer);
          out = added && (added.prompt || added.response) ? stripTokenFields(text, added) : text;
        }
        metrics.countRequest(route, worker.id, status);
        if (!res.destroyed) {
          answerHeaders["content-length"] = typeof out === "string" ? Buffer.byteLength(out) : out.length;
          res.writeHead(status, answerHeaders);
          res.end(out);
        }
        finish({ kind: "done", status, error: null, result });
      },
      onResponseError(_controller, e) {
        if (!sse) {
          // Nothing has gone to the client yet: it gets a clean error answer (or a retry elsewhere).
          finish(upstreamFailed(ctx, route, worker, res, e, client.gone, flavor));
          return;
        }
        if (client.gone) {
          metrics.clientAborts.inc({ route });
          res.destroy();
          metrics.countRequest(route, worker.id, status);
          finish({ kind: "done", status, error: "client disconnected", result: null });
          return;
        }
        const kind = classifyUpstreamError(e);
        metrics.upstreamErrors.inc({ worker: worker.id, kind });
        // Not drained here: a worker that died refuses the next connection and is drained then;
        // one that only lost this connection keeps its sessions and its blocks in the index.
        ctx.log(`gateway: worker ${worker.id} failed mid-stream (${kind}: ${e.message}); client told`);
        res.end(streamErrorEvent(flavor, "upstream_error", `worker ${worker.id} failed mid-stream (${kind}); retry the request`));
        metrics.countRequest(route, worker.id, 502);
        finish({ kind: "done", status, error: `worker failed mid-stream: ${e.message}`, result: null });
      },
    };
    worker.pool.dispatch({ method: "POST", path: PATHS[route], headers: forwardHeaders(headers), body: raw }, handler);
  });
}

/** Waits for the ticket's turn on the worker; false when the client went away first. */
async function admitted(ctx: TurnContext, worker: GatewayWorker, ticket: AdmissionTicket, client: ClientLink): Promise<boolean> {
  const { metrics } = ctx;
  const t0 = performance.now();
  metrics.admissionQueued.inc({ worker: worker.id });
  metrics.admissionWaiting.inc({ worker: worker.id });
  const ok = await new Promise<boolean>((resolve) => {
    client.onGone(() => resolve(false));
    void ticket.ready.then(() => resolve(true));
  });
  client.onGone(null);
  metrics.admissionWaiting.dec({ worker: worker.id });
  metrics.admissionWaitSeconds.inc({ worker: worker.id }, (performance.now() - t0) / 1000);
  return ok;
}

function upstreamFailed(ctx: TurnContext, route: RouteKind, worker: GatewayWorker, res: ServerResponse, e: unknown, clientGone: boolean, flavor: ApiFlavor): CallOutcome {
  const { metrics } = ctx;
  if (clientGone) {
    metrics.clientAborts.inc({ route });
    metrics.countRequest(route, worker.id, 499);
    return { kind: "done", status: 0, error: "client disconnected", result: null };
  }
  const kind = classifyUpstreamError(e);
  metrics.upstreamErrors.inc({ worker: worker.id, kind });
  if (kind === "connect") {
    ctx.workers.drain(worker, `connection refused: ${(e as Error).message}`);
    return { kind: "retry", error: `connection refused: ${(e as Error).message}` };
  }
  // A connection closed before any answer (most often a kept-alive one the worker closed as the
  // request went out) says nothing about the worker: the request is sent again on a fresh one,
  // and the worker is drained only if it then refuses connections.
  if (kind === "reset") return { kind: "retry", error: `connection reset: ${(e as Error).message}` };
  const status = kind === "timeout" ? 504 : 502;
  const msg = kind === "timeout" ? `worker ${worker.id} timed out` : `worker ${worker.id} failed: ${(e as Error).message}`;
  metrics.countRequest(route, worker.id, status);
  sendJson(res, status, errorBody(flavor, kind === "timeout" ? "upstream_timeout" : "upstream_error", msg));
  return { kind: "done", status, error: msg, result: null };
}
