// The gateway's configuration: one zod schema for the file (YAML or JSON) and for the options of
// createGateway(), and the types it defines; loading and validating it is load.ts. Objects are
// strict, so a typo in a key is an error naming the key, not a setting silently ignored.
import { z } from "zod";
import { policiesConfigSchema } from "../../contract/policies-config.js";
import { checkSubjectPrefix } from "../../protocol/subjects.js";
import { authConfigSchema } from "../auth/config.js";
import { tlsConfigSchema } from "../auth/tls.js";
import {
  drainConfigSchema,
  listenerConfigSchema,
  loggingConfigSchema,
  telemetryConfigSchema,
} from "./ops.js";
import { workerConfigSchema } from "./workers.js";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");
const nonNegative = z.number().min(0, "must be >= 0");

export const natsConfigSchema = z.strictObject({
  url: z.string().min(1).optional(),
  user: z.string().optional(),
  /** Prefer passwordFile or $NATS_PASSWORD: a secret in the file is as readable as the file. */
  password: z.string().optional(),
  passwordFile: z.string().min(1).optional(),
  token: z.string().optional(),
  tokenFile: z.string().min(1).optional(),
  nkeySeedFile: z.string().optional(),
  creds: z.string().optional(),
  tlsCa: z.string().optional(),
  tlsCert: z.string().optional(),
  tlsKey: z.string().optional(),
  tlsHandshakeFirst: z.boolean().optional(),
  subjectPrefix: z
    .string()
    .refine(
      (s) => {
        try {
          checkSubjectPrefix(s);
          return true;
        } catch {
          return false;
        }
      },
      { message: "must be dot-separated tokens of A-Z a-z 0-9 _ -" },
    )
    .optional(),
  inboxPrefix: z.string().optional(),
  /** Time one NATS operation (KV get/put) may take before the gateway goes on without it (ms). */
  opTimeoutMs: positiveInt.default(500),
  /** Time a worker has to ack a command before it is sent again under the same id (ms): a worker
   * applies commands between scheduler turns, so this should exceed its longest turn. */
  commandTimeoutMs: positiveInt.default(1000),
  /** Resends of an unanswered command (the worker answers a resend of an applied one `duplicate`). */
  commandRetries: z.number().int().min(0).default(2),
});

export const routingConfigSchema = z.strictObject({
  /** sgl-model-gateway: above this match rate (matched blocks / request blocks) the best match wins. */
  cacheThreshold: z.number().min(0).max(1).default(0.3),
  /** Pick the least-loaded worker when max - min in-flight exceeds this ... */
  balanceAbsThreshold: nonNegative.default(64),
  /** ... and max > min * this. */
  balanceRelThreshold: z.number().min(1).default(1.5),
  /** How long a session sticks to its worker after its last turn (s). */
  sessionAffinityTtlSeconds: nonNegative.default(600),
  /** A session's turn is routed like a new one when its worker's device pool cannot hold it beside
   * the prompts in flight there (that worker's /server_info max_total_num_tokens); off by default,
   * on by default under the agent policy (withAgentDefaults). */
  sessionYieldsWhenFull: z.boolean().default(false),
  /** Tokenize prompts on a worker before routing when the index holds blocks ("auto") or never. */
  tokenize: z.enum(["auto", "never"]).default("auto"),
  /** Dynamo scorer settings (src/index/scoring.ts ScoringConfig), e.g. sharedCacheMultiplier. */
  scoring: z
    .strictObject({
      overlapScoreCredit: z.number().optional(),
      overlapScoreCreditDecay: z.number().optional(),
      prefillLoadScale: z.number().optional(),
      hostCacheHitWeight: z.number().optional(),
      diskCacheHitWeight: z.number().optional(),
      sharedCacheMultiplier: z.number().optional(),
      decodeActiveRequestWeight: z.number().optional(),
      temperature: z.number().min(0).optional(),
    })
    .default({}),
});

export const gatewayConfigSchema = z.strictObject({
  listen: z
    .strictObject({
      host: z.string().default("127.0.0.1"),
      port: z.number().int().min(0).max(65535).default(8080),
      tls: tlsConfigSchema.optional(),
      /** Serve a non-loopback address without TLS or without auth (listen-exposure.ts). */
      insecure: z.boolean().default(false),
    })
    .default({ host: "127.0.0.1", port: 8080, insecure: false }),
  workers: z.array(workerConfigSchema).min(1, "needs at least one worker"),
  /** Client-side deadlines and caps (ops.ts). */
  listener: listenerConfigSchema,
  /** Shutdown on SIGTERM (ops.ts). */
  drain: drainConfigSchema,
  /** Latency histograms and trace export (ops.ts). */
  telemetry: telemetryConfigSchema,
  /** The gateway's own log: text or levelled JSON with request ids (ops.ts). */
  logging: loggingConfigSchema,
  nats: natsConfigSchema.optional(),
  /** Client keys, tenants and the admin key (auth/config.ts); absent: no authentication. */
  auth: authConfigSchema.optional(),
  routing: routingConfigSchema.default(routingConfigSchema.parse({})),
  limits: z
    .strictObject({
      /** Largest request body accepted (bytes); larger ones get 413. */
      bodyLimitBytes: positiveInt.default(16 * 1024 * 1024),
      /** Time to open a connection to a worker (ms). */
      upstreamConnectTimeoutMs: positiveInt.default(10_000),
      /** Time to a worker's response headers on a streamed call or one that generates nothing
       * (models, tokenize, count_tokens) (ms). Not applied to a non-streamed generation, whose
       * headers come with its last byte (see upstreamResponseTimeoutMs). */
      upstreamHeadersTimeoutMs: positiveInt.default(300_000),
      /** Longest a non-streamed generation may run before its answer (ms); 0: no limit while the
       * worker passes health (a worker that keeps failing it is drained and its calls end). */
      upstreamResponseTimeoutMs: z
        .number()
        .int("must be an integer")
        .min(0, "must be >= 0")
        .default(0),
      /** Longest silence between two chunks of a worker's answer (ms). */
      upstreamIdleTimeoutMs: positiveInt.default(300_000),
      /** Pooled connections per worker. */
      connectionsPerWorker: positiveInt.default(256),
      /** Policy commands waiting for NATS; beyond this new ones are dropped and counted. */
      commandQueue: positiveInt.default(1024),
    })
    .default({
      bodyLimitBytes: 16 * 1024 * 1024,
      upstreamConnectTimeoutMs: 10_000,
      upstreamHeadersTimeoutMs: 300_000,
      upstreamResponseTimeoutMs: 0,
      upstreamIdleTimeoutMs: 300_000,
      connectionsPerWorker: 256,
      commandQueue: 1024,
    }),
  /** Admission (src/gateway/admission.ts): what a worker is sent at once; the rest wait here. */
  admission: z
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
        message:
          "a queue bound needs a queue: set maxRequestsPerWorker or maxPromptTokensPerWorker",
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
    }),
  health: z
    .strictObject({
      intervalMs: positiveInt.default(2000),
      /** SGLang's /health runs a one-token generation and answers after a second at the earliest. */
      timeoutMs: positiveInt.default(5000),
      /** Consecutive failed checks before a worker is drained. */
      failures: positiveInt.default(3),
      /** A worker drained for failing health takes no new traffic at once; its calls under way
       * are cut only if it still fails health this long after (ms; 0: at once). A worker busy
       * enough to answer /health late keeps its work; a dead one's calls still end. */
      cutCallsAfterMs: z.number().int("must be an integer").min(0, "must be >= 0").default(30_000),
    })
    .default({ intervalMs: 2000, timeoutMs: 5000, failures: 3, cutCallsAfterMs: 30_000 }),
  sessions: z
    .strictObject({
      /** JetStream KV bucket holding session records (shared by replicas). */
      bucket: z
        .string()
        .regex(/^[A-Za-z0-9_-]+$/, "must be A-Z a-z 0-9 _ -")
        .default("kvctl_sessions"),
      /** Records expire this long after their last write (s); 0 = never. */
      ttlSeconds: nonNegative.default(86_400),
      /** A session with no turn for this long is reported idle to the policy (s). */
      idleAfterSeconds: nonNegative.default(30),
      /** Commands kept in a record (oldest dropped first). */
      maxCommands: positiveInt.default(64),
      /** How often a replica writes its heartbeat; one silent for 3 of them has its in-flight holds reaped (ms). */
      heartbeatMs: positiveInt.default(2000),
      /** How often each worker's Inspect is read to reconcile pins and notice a restart (ms); 0 = never. */
      inspectMs: nonNegative.default(10_000),
    })
    .default({
      bucket: "kvctl_sessions",
      ttlSeconds: 86_400,
      idleAfterSeconds: 30,
      maxCommands: 64,
      heartbeatMs: 2000,
      inspectMs: 10_000,
    }),
  /** Which policy turns observations into commands ("agent": the rules of src/policy, set in `policies`). */
  policy: z.enum(["noop", "log", "agent"]).default("noop"),
  /** Settings of the agent policy's rules (each can be switched off). */
  policies: policiesConfigSchema.optional(),
  /** One JSON line per routing decision on stdout. */
  jsonLog: z.boolean().default(false),
  /** Read each worker's /server_info at start (off only for upstreams that are not SGLang). */
  probeWorkers: z.boolean().default(true),
});

export type GatewayConfigInput = z.input<typeof gatewayConfigSchema>;
export type GatewayConfig = z.output<typeof gatewayConfigSchema>;
export type NatsConfig = z.output<typeof natsConfigSchema>;
export type RoutingConfig = z.output<typeof routingConfigSchema>;
