// The worker's answer on its way to the client, as an undici dispatch handler writing straight to
// the client's response: no body stream, no abort signal and no intermediate copy per request.
// A streamed answer goes through as it comes, with backpressure; a whole one is sent at the end
// with the token-id fields the gateway added cut out. A worker that fails is told apart (timeout,
// refused, reset) and drained when it is gone.
import type { TurnWorker } from "./ports.js";
import type { TurnResult } from "../workers/turn-result.js";
import type { ServerResponse } from "node:http";
import { type Dispatcher, errors as undiciErrors } from "undici";
import type { RouteKind } from "../../contract/observations.js";
import { errorBody, sendJson, streamErrorEvent } from "../core/errors.js";
import { IdsFrameFilter } from "./stream-output-ids.js";
import { StreamScan } from "./stream-scan.js";
import { stripTokenFields, turnResultOf } from "../workers/token-truth.js";
import { NO_RETRY_HEADERS } from "../core/timeouts.js";
import type { TurnReports } from "../telemetry/reports.js";
import { classifyUpstreamError } from "../workers/upstream.js";
import type { CallOutcome, WorkerCall } from "./call.js";
import type { CallClock } from "../telemetry/latency.js";
import { requestFields } from "../http/request-log.js";
import { onResponseClose } from "../core/response-close.js";

const PASS_RESPONSE_HEADERS = ["content-type", "cache-control", "x-request-id"];

export function passHeaders(
  workerId: string,
  upstream: Record<string, string | string[] | undefined>,
): Record<string, string | number> {
  const out: Record<string, string | number> = { "x-kvctl-worker": workerId };
  for (const h of PASS_RESPONSE_HEADERS) {
    const v = upstream[h];
    if (v !== undefined) out[h] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}

export class AnswerRelay implements Dispatcher.DispatchHandler {
  private status = 0;
  private sse = false;
  private json = false;
  private scan: StreamScan | null = null;
  /** Cuts the output-ids event the gateway asked for from a stream (stream-output-ids.ts). */
  private idsFilter: IdsFrameFilter | null = null;
  private headers: Record<string, string | number> = {};
  private readonly chunks: Buffer[] = [];
  private settled = false;
  private abortOnDrain: (() => void) | null = null;
  private readonly route: RouteKind;
  private readonly res: ServerResponse;

  constructor(
    /** Takes a worker that refused the connection out of rotation (the worker set's drain). */
    private readonly drain: (worker: TurnWorker, why: string) => void,
    private readonly tel: TurnReports,
    private readonly call: WorkerCall,
    /** Gives the call's place on the worker back (idempotent). */
    /** Gives the worker's room back; the result says whether the reply was a tool call. */
    private readonly release: (result: TurnResult | null) => void,
    private readonly resolve: (o: CallOutcome) => void,
    /** The call's latency clock (latency.ts), when the histograms are on. */
    private readonly clock: CallClock | null = null,
    /** The gateway asked for the stream's output ids in a framed event of their own. */
    private readonly cutIdsEvent = false,
  ) {
    this.route = call.turn.route;
    this.res = call.res;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.call.client.onGone(() => controller.abort(new undiciErrors.RequestAbortedError()));
    this.abortOnDrain = () =>
      controller.abort(new Error(`worker ${this.call.worker.id} was drained while answering`));
    this.call.worker.calls.add(this.abortOnDrain);
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    upstream: Record<string, string | string[] | undefined>,
  ): void {
    this.status = statusCode;
    const contentType = String(upstream["content-type"] ?? "");
    this.sse = contentType.includes("text/event-stream");
    this.json = contentType.includes("json");
    this.headers = passHeaders(this.call.worker.id, upstream);
    // Not streamed: sent whole at the end (token fields cut out first).
    if (!this.sse) return;
    // Streaming: bytes go to the client as they come; a full client buffer pauses the worker's
    // stream (backpressure). The scan only looks for the closing usage/finish_reason.
    this.scan = new StreamScan(this.route);
    if (this.cutIdsEvent) this.idsFilter = new IdsFrameFilter();
    this.res.writeHead(statusCode, this.headers);
    this.res.on("drain", () => controller.resume());
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.sse) {
      this.chunks.push(chunk);
      return;
    }
    this.scan?.push(chunk);
    this.clock?.chunk();
    const out = this.idsFilter ? this.idsFilter.push(chunk) : chunk;
    if (out.length > 0 && !this.res.destroyed && !this.res.write(out)) controller.pause();
  }

  onResponseEnd(): void {
    if (this.sse) {
      const held = this.idsFilter?.end();
      if (held && !this.res.destroyed) this.res.write(held);
      this.res.end();
      this.tel.metrics.countRequest(this.route, this.call.worker.id, this.status);
      this.finish({
        kind: "done",
        status: this.status,
        error: null,
        result: this.scan?.result() ?? null,
      });
      return;
    }
    // The worker's room is free before the answer goes out.
    const { out, result } = this.wholeAnswer();
    this.release(result);
    this.tel.metrics.countRequest(this.route, this.call.worker.id, this.status);
    if (!this.res.destroyed) {
      this.headers["content-length"] =
        typeof out === "string" ? Buffer.byteLength(out) : out.length;
      this.res.writeHead(this.status, this.headers);
      this.res.end(out);
    }
    this.finish({ kind: "done", status: this.status, error: null, result });
  }

  onResponseError(_controller: Dispatcher.DispatchController, e: Error): void {
    // Nothing has gone to the client yet: it gets a clean error answer (or a retry elsewhere).
    if (!this.sse) this.finish(this.failedBeforeAnswer(e));
    else this.finish(this.failedMidStream(e));
  }

  private finish(o: CallOutcome): void {
    if (this.settled) return;
    this.settled = true;
    this.call.client.onGone(null);
    if (this.abortOnDrain) this.call.worker.calls.delete(this.abortOnDrain);
    this.release(o.kind === "done" ? o.result : null);
    this.resolve(o);
  }

  /** The whole answer as the client gets it, and what it tells about the turn. */
  private wholeAnswer(): { out: Buffer | string; result: TurnResult | null } {
    const buf = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    if (this.status !== 200 || !this.json) return { out: buf, result: null };
    const text = buf.toString("utf8");
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = null;
    }
    const added = this.call.turn.added;
    return {
      out: added && (added.prompt || added.response) ? stripTokenFields(text, added) : text,
      result: turnResultOf(this.route, parsed),
    };
  }

  private failedMidStream(e: Error): CallOutcome {
    const { metrics } = this.tel;
    const worker = this.call.worker;
    if (this.call.client.gone) {
      metrics.clientAborts.inc({ route: this.route });
      this.res.destroy();
      metrics.countRequest(this.route, worker.id, this.status);
      return { kind: "done", status: this.status, error: "client disconnected", result: null };
    }
    const kind = classifyUpstreamError(e);
    metrics.upstreamErrors.inc({ worker: worker.id, kind });
    // Not drained here: a worker that died refuses the next connection and is drained then;
    // one that only lost this connection keeps its sessions and its blocks in the index.
    const what = `gateway: worker ${worker.id} failed mid-stream (${kind}: ${e.message})`;
    const fields = requestFields(this.res.req);
    // Told only once the error event went out: a connection the gateway cut (a drain's grace over)
    // or the client closed first gets none.
    const said = () =>
      this.tel.log.warn(
        this.res.writableFinished
          ? `${what}; the client was sent an error event`
          : `${what}; the client's connection closed before the error event went out`,
        fields,
      );
    if (this.res.destroyed) said();
    else onResponseClose(this.res, said);
    this.res.end(
      streamErrorEvent(
        this.call.turn.flavor,
        "upstream_error",
        `worker ${worker.id} failed mid-stream (${kind}); retry the request`,
      ),
    );
    metrics.countRequest(this.route, worker.id, 502);
    return {
      kind: "done",
      status: this.status,
      error: `worker failed mid-stream: ${e.message}`,
      result: null,
    };
  }

  private failedBeforeAnswer(e: Error): CallOutcome {
    const { metrics } = this.tel;
    const worker = this.call.worker;
    if (this.call.client.gone) {
      metrics.clientAborts.inc({ route: this.route });
      metrics.countRequest(this.route, worker.id, 499);
      return { kind: "done", status: 0, error: "client disconnected", result: null };
    }
    const kind = classifyUpstreamError(e);
    metrics.upstreamErrors.inc({ worker: worker.id, kind });
    if (kind === "connect") {
      this.drain(worker, `connection refused: ${e.message}`);
      return { kind: "retry", error: `connection refused: ${e.message}` };
    }
    // A connection closed before any answer (most often a kept-alive one the worker closed as the
    // request went out) says nothing about the worker: the request is sent again on a fresh one,
    // and the worker is drained only if it then refuses connections.
    if (kind === "reset") return { kind: "retry", error: `connection reset: ${e.message}` };
    const status = kind === "timeout" ? 504 : 502;
    const msg =
      kind === "timeout"
        ? `worker ${worker.id} timed out`
        : `worker ${worker.id} failed: ${e.message}`;
    metrics.countRequest(this.route, worker.id, status);
    sendJson(
      this.res,
      status,
      errorBody(
        this.call.turn.flavor,
        kind === "timeout" ? "upstream_timeout" : "upstream_error",
        msg,
      ),
      kind === "timeout" ? NO_RETRY_HEADERS : undefined,
    );
    return { kind: "done", status, error: msg, result: null };
  }
}
