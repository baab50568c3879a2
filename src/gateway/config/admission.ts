// Admission: what a worker is sent at once, what waits, and how long (schema.ts folds it into the
// one schema).
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

/** Admission (src/gateway/admission.ts): what a worker is sent at once; the rest wait here. */
export const admissionConfigSchema = z
  .strictObject({
    /** Requests a worker runs at once. */
    maxRequestsPerWorker: positiveInt.optional(),
    /** Prompt tokens a worker runs at once (its device pool, say); a larger request runs alone. */
    maxPromptTokensPerWorker: positiveInt.optional(),
    /** Requests that may wait for room on one worker; one more is answered 429 at once. */
    maxQueuedPerWorker: positiveInt.optional(),
    /** Longest a request may wait for room (ms); past it the request is answered 503. */
    queueTimeoutMs: positiveInt.optional(),
    /** request: each request admitted on its own; program: a session keeps its slot through its
     * tool loop and whole programs pause under KV pressure (src/gateway/program-admission.ts). */
    mode: z.enum(["request", "program"]).default("request"),
    /** program mode: a worker's device + host KV capacity in tokens. */
    capacityTokensPerWorker: positiveInt.optional(),
    /** program mode: share of capacity above which programs pause at a tool boundary. */
    pauseAt: z.number().gt(0).max(1).default(0.95),
    /** program mode: share pausing brings usage down to, and under which paused programs resume. */
    resumeBelow: z.number().gt(0).max(1).default(0.8),
    /** program mode: how long a program between tool calls keeps its slot. */
    holdSeconds: z.number().gt(0).default(60),
    /** program mode: let the policy decide keep / park / let go at each tool boundary (the
     * agent policy does: src/policy/program-retention.ts); default on. */
    retention: z.boolean().default(true),
    /** program mode: longest a parked program's request waits for its restore before it is admitted anyway (ms). */
    prefetchDeadlineMs: positiveInt.default(2000),
  })
  .refine(
    (a) =>
      a.mode === "request" ||
      (a.maxRequestsPerWorker !== undefined && a.capacityTokensPerWorker !== undefined),
    {
      message:
        "mode program needs maxRequestsPerWorker (programs per worker) and capacityTokensPerWorker",
      path: ["mode"],
    },
  )
  .refine((a) => a.resumeBelow < a.pauseAt, {
    message: "must be below pauseAt",
    path: ["resumeBelow"],
  })
  .refine(
    (a) =>
      (a.maxQueuedPerWorker === undefined && a.queueTimeoutMs === undefined) ||
      a.mode === "program" ||
      a.maxRequestsPerWorker !== undefined ||
      a.maxPromptTokensPerWorker !== undefined,
    {
      message: "a queue bound needs a queue: set maxRequestsPerWorker or maxPromptTokensPerWorker",
      path: ["maxQueuedPerWorker"],
    },
  )
  .default({
    mode: "request",
    pauseAt: 0.95,
    resumeBelow: 0.8,
    holdSeconds: 60,
    retention: true,
    prefetchDeadlineMs: 2000,
  });

export type AdmissionConfig = z.output<typeof admissionConfigSchema>;
