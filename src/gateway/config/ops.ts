// The operational parts of the gateway's configuration: the listener's own deadlines and caps,
// drain on shutdown, telemetry and logging. Kept apart from schema.ts (routing, limits towards the
// workers, sessions) so that each reads as one concern; schema.ts folds these into the one schema.
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

const LISTENER_DEFAULTS = {
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 60_000,
  idleTimeoutMs: 72_000,
  maxConnections: 16_384,
};

/** Deadlines and caps on the client side: every door a client holds open is bounded. */
export const listenerConfigSchema = z
  .strictObject({
    /** Time a client has to send its request headers (ms). */
    headersTimeoutMs: positiveInt.default(LISTENER_DEFAULTS.headersTimeoutMs),
    /** Time a client has to send its whole request, headers and body (ms): a body trickled slower is cut (408) and its connection closed. */
    bodyTimeoutMs: positiveInt.default(LISTENER_DEFAULTS.bodyTimeoutMs),
    /** How long a kept-alive connection may sit idle between requests (ms). */
    idleTimeoutMs: positiveInt.default(LISTENER_DEFAULTS.idleTimeoutMs),
    /** Open client connections at most; one more is closed at once (counted). */
    maxConnections: positiveInt.default(LISTENER_DEFAULTS.maxConnections),
  })
  .refine((l) => l.headersTimeoutMs <= l.bodyTimeoutMs, {
    message: "must not exceed bodyTimeoutMs",
    path: ["headersTimeoutMs"],
  })
  .default(LISTENER_DEFAULTS);

const DRAIN_DEFAULTS = { graceMs: 30_000, retryAfterSeconds: 5 };

/** What SIGTERM does: stop taking requests, let the ones under way finish, then flush. */
export const drainConfigSchema = z
  .strictObject({
    /** How long requests and streams under way may take to finish after SIGTERM (ms). */
    graceMs: positiveInt.default(DRAIN_DEFAULTS.graceMs),
    /** Retry-After on the 503 a request gets while the gateway drains (s). */
    retryAfterSeconds: positiveInt.default(DRAIN_DEFAULTS.retryAfterSeconds),
  })
  .default(DRAIN_DEFAULTS);

/** Latency histograms and, when an endpoint is named, OTLP trace export. */
export const telemetryConfigSchema = z
  .strictObject({
    /** TTFT, inter-token and end-to-end latency histograms (kvctl_gateway_*_seconds). */
    latencyHistograms: z.boolean().default(true),
    /** OTLP/HTTP traces endpoint (the OpenTelemetry SDK exports to it, see trace.ts), e.g. http://collector:4318/v1/traces; unset: no spans are exported. */
    otlpTracesUrl: z
      .string()
      .refine((s) => /^https?:\/\/[^\s]+$/.test(s), { message: "must be an http(s) URL" })
      .optional(),
    /** service.name on exported spans. */
    serviceName: z.string().min(1).default("kvctl-gateway"),
  })
  .default({ latencyHistograms: true, serviceName: "kvctl-gateway" });

/** The gateway's own log: plain lines (text) or one JSON object a line (pino) with levels and request ids. */
export const loggingConfigSchema = z
  .strictObject({
    /** text: the operational lines as they are; json: levelled JSON lines, plus one line per request. */
    format: z.enum(["text", "json"]).default("text"),
    /** json: lines below this level are not written (requests log at info, 5xx answers at warn). */
    level: z.enum(["debug", "info", "warn", "error"]).default("info"),
  })
  .default({ format: "text", level: "info" });

export type ListenerConfig = z.output<typeof listenerConfigSchema>;
export type DrainConfig = z.output<typeof drainConfigSchema>;
export type TelemetryConfig = z.output<typeof telemetryConfigSchema>;
export type LoggingConfig = z.output<typeof loggingConfigSchema>;
