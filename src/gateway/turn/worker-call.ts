// The call to the chosen worker: the request bytes (token ids asked for when the answer is not
// streamed, see request/turn-request.ts; a chat stream's output ids by header, stream-output-ids.ts), then the answer passed back by the relay
// (answer-relay.ts). While it runs the call holds a place on the worker: its in-flight counts,
// the duration timer and, under admission limits, a ticket it may have to wait for.
import type { TurnWorker } from "./ports.js";
import type { TurnResult } from "../workers/turn-result.js";
import type { IncomingHttpHeaders } from "node:http";
import type { AdmissionTicket } from "../admission.js";
import { continuesToolLoop } from "../admission-mode.js";
import { AnswerRelay } from "./answer-relay.js";
import { asksStreamOutputIds, STREAM_IDS_HEADERS } from "./stream-output-ids.js";
import type { CallOutcome, ClientLink, WorkerCall } from "./call.js";
import { ROUTE_PATHS } from "../request/routes.js";
import { callTimeouts } from "../core/timeouts.js";
import type { Span } from "../telemetry/trace.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "./turn-deps.js";
import { admissionBound, type Refusal, refuse } from "../admission-bound.js";
import { tenantLabel } from "./tenant-label.js";
import { withSessionId } from "../workers/radix-sessions.js";
import { CredentialPool, isClientKey } from "../auth/upstream-credentials.js";

// Hop-by-hop and framing headers are the gateway's own business on each leg.
export const DROP_REQUEST_HEADERS = new Set([
  "host",
  "connection",
  "content-length",
  "transfer-encoding",
  "keep-alive",
  "upgrade",
  "expect",
  "te",
  "proxy-connection",
]);

/** The client's headers as the worker gets them; a pool holding the worker's key sets it here, in the same copy. */
function forwardHeaders(
  headers: IncomingHttpHeaders,
  span: Span | null,
  signer: CredentialPool | null,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k in headers) {
    const v = headers[k];
    if (v === undefined || DROP_REQUEST_HEADERS.has(k) || (signer && isClientKey(k))) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  out["content-type"] = "application/json";
  if (signer) signer.signInference(out);
  if (span) {
    out.traceparent = span.traceparent;
    if (span.tracestate) out.tracestate = span.tracestate;
    else delete out.tracestate;
  }
  return out;
}

export async function callWorker(
  deps: TurnDeps,
  tel: Telemetry,
  call: WorkerCall,
): Promise<CallOutcome> {
  const { turn, worker } = call;
  const place = occupy(tel, call);
  if (place.ticket?.queued) {
    const refused = await waitAdmitted(deps, tel, call, place);
    if (refused) return refused;
  }
  // A streamed chat turn asks for its output ids (token truth), cut from what the client gets.
  const askIds = asksStreamOutputIds(turn, worker.streamOutputIds);
  return new Promise<CallOutcome>((resolve) => {
    const span = tel.tracer?.start(`POST ${ROUTE_PATHS[turn.route]}`, turn.headers) ?? null;
    const clock =
      tel.latency?.start(turn.route, worker.id, tenantLabel(turn), call.startedAt) ?? null;
    const relay = new AnswerRelay(
      (w, why) => deps.workers.drain(w, why),
      tel,
      call,
      place.release,
      (o) => {
        clock?.end();
        span?.end(o.kind === "done" ? o.status : 0, {
          "kvctl.worker": worker.id,
          "kvctl.route": turn.route,
          "kvctl.tenant": tenantLabel(turn),
        });
        resolve(o);
      },
      clock,
      askIds,
    );
    const timeouts = callTimeouts(deps.config.limits, !turn.stream);
    const forwarded = forwardHeaders(
      turn.headers,
      span,
      worker.pool instanceof CredentialPool ? worker.pool : null,
    );
    const headers = askIds ? Object.assign(forwarded, STREAM_IDS_HEADERS) : forwarded;
    worker.pool.dispatch(
      {
        method: "POST",
        path: ROUTE_PATHS[turn.route],
        headers,
        body: bodyFor(turn, worker),
        ...timeouts,
      },
      relay,
    );
  });
}

/** A queued call waits for its turn on the worker: null once admitted, else its outcome (refused or gone). */
async function waitAdmitted(
  deps: TurnDeps,
  tel: Telemetry,
  call: WorkerCall,
  place: { ticket: AdmissionTicket | null; release: () => void },
): Promise<CallOutcome | null> {
  const { turn, worker } = call;
  const bound = admissionBound(deps.config.admission);
  const over: Refusal | "gone" | null =
    (worker.gate?.waiting ?? 0) > bound.maxQueued
      ? "queue_full"
      : await admitted(tel, worker, place.ticket as AdmissionTicket, call.client, bound.timeoutMs);
  if (over) place.release();
  if (over === "gone") {
    tel.metrics.clientAborts.inc({ route: turn.route });
    tel.metrics.countRequest(turn.route, worker.id, 499);
    return {
      kind: "done",
      status: 0,
      error: "client disconnected while waiting for admission",
      result: null,
    };
  }
  return over ? refuse(deps.config.admission, tel, call, over, tenantLabel(turn)) : null;
}

/** The bytes sent: a session turn to a worker running SGLang's session radix cache names its session (radix-sessions.ts). */
function bodyFor(turn: WorkerCall["turn"], worker: TurnWorker): Buffer {
  if (!worker.sessionRadix || !turn.session || turn.engineSession || turn.route === "messages")
    return turn.upstreamBody;
  return withSessionId(turn.upstreamBody, turn.session.id);
}

/** The call's place on its worker, given back once by release (idempotent). */
function occupy(
  tel: Telemetry,
  call: WorkerCall,
): { ticket: AdmissionTicket | null; release: (result?: TurnResult | null) => void } {
  const { worker, promptTokenCount } = call;
  worker.inFlight++;
  worker.inFlightPromptTokens += promptTokenCount;
  const leaveKv = worker.inFlightKv.enter(
    call.promptBlocks,
    promptTokenCount,
    worker.scheme?.pageSize ?? 1,
  );
  const since = performance.now();
  // A prompt the gateway did not tokenize is sized from its body (about 4 bytes a token).
  // Program admission holds the session's slot through its tool loop (a reply that is a tool call).
  const ticket =
    worker.gate?.enter(
      promptTokenCount || Math.ceil(call.turn.raw.length / 4),
      call.turn.session?.id ?? null,
    ) ?? null;
  let released = false;
  const release = (result: TurnResult | null = null) => {
    if (released) return;
    released = true;
    ticket?.release(
      continuesToolLoop(result),
      result?.toolCalls.map((c) => c.name),
    );
    worker.inFlight--;
    worker.inFlightPromptTokens -= promptTokenCount;
    leaveKv();
    const answer = result?.usage.completionTokens ?? result?.outputTokens?.length;
    if (answer != null) worker.inFlightKv.answered(answer);
    tel.metrics.duration.observe({ route: call.turn.route }, (performance.now() - since) / 1000);
  };
  return { ticket, release };
}

/** Waits for the ticket's turn on the worker: null once admitted, or why it was not. */
async function admitted(
  tel: Telemetry,
  worker: TurnWorker,
  ticket: AdmissionTicket,
  client: ClientLink,
  timeoutMs: number | null,
): Promise<"gone" | "deadline" | null> {
  const { metrics } = tel;
  const t0 = performance.now();
  metrics.admissionQueued.inc({ worker: worker.id });
  metrics.admissionWaiting.inc({ worker: worker.id });
  let timer: NodeJS.Timeout | undefined;
  const ok = await new Promise<"gone" | "deadline" | null>((resolve) => {
    client.onGone(() => resolve("gone"));
    if (timeoutMs !== null) timer = setTimeout(() => resolve("deadline"), timeoutMs);
    void ticket.ready.then(() => resolve(null));
  });
  clearTimeout(timer);
  client.onGone(null);
  metrics.admissionWaiting.dec({ worker: worker.id });
  metrics.admissionWaitSeconds.inc({ worker: worker.id }, (performance.now() - t0) / 1000);
  return ok;
}
