// The bounds on the admission queue: how many requests may wait for room on one worker, and how
// long each may wait. Over either the request is refused at once with Retry-After, so a client
// backs off instead of queueing without end: 429 when the queue is full (nothing was waited for),
// 503 when its wait ran out (the worker stayed full).
import type { CallOutcome, WorkerCall } from "./turn/call.js";
import type { AdmissionConfig } from "./config/admission.js";
import { errorBody, sendJson } from "./core/errors.js";
import type { TurnReports } from "./telemetry/reports.js";

export type Refusal = "queue_full" | "deadline";

export interface AdmissionBound {
  /** Requests that may wait per worker (Infinity: unbounded). */
  maxQueued: number;
  /** Longest wait (ms), or null for none. */
  timeoutMs: number | null;
}

export function admissionBound(a: AdmissionConfig): AdmissionBound {
  return {
    maxQueued: a.maxQueuedPerWorker ?? Number.POSITIVE_INFINITY,
    timeoutMs: a.queueTimeoutMs ?? null,
  };
}

/** Seconds a refused client is told to wait: a queue slot or room frees within about one wait. */
function retryAfterSeconds(a: AdmissionConfig): number {
  return Math.max(1, Math.ceil((a.queueTimeoutMs ?? 1000) / 1000));
}

/** Answers a refused request (counted by worker, reason and tenant) and ends its turn. */
export function refuse(
  admission: AdmissionConfig,
  tel: TurnReports,
  call: WorkerCall,
  why: Refusal,
  tenant: string,
): CallOutcome {
  const { turn, worker, res } = call;
  const status = why === "queue_full" ? 429 : 503;
  tel.metrics.ops.admissionRefused.inc({ worker: worker.id, reason: why, tenant });
  tel.metrics.countRequest(turn.route, worker.id, status);
  const message =
    why === "queue_full"
      ? `worker ${worker.id} has admission.maxQueuedPerWorker requests waiting already; retry later`
      : `waited admission.queueTimeoutMs for room on worker ${worker.id}; retry later`;
  sendJson(
    res,
    status,
    errorBody(turn.flavor, why === "queue_full" ? "rate_limited" : "service_unavailable", message),
    { "retry-after": String(retryAfterSeconds(admission)) },
  );
  return { kind: "done", status, error: `admission: ${why}`, result: null };
}
