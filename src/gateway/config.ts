// The gateway's configuration: one zod schema for the file (YAML or JSON) and for the options of
// createGateway(); CLI flags are folded in on top of the file. Objects are strict, so a typo in a
// key is an error naming the key, not a setting silently ignored.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { policiesConfigSchema } from "../contract/policies-config.js";
import { checkSubjectPrefix, checkWorkerId } from "../protocol/subjects.js";
import { authConfigSchema, workerCredentialFields } from "./auth/config.js";
import { tlsConfigSchema } from "./auth/tls.js";
import {
  drainConfigSchema,
  listenerConfigSchema,
  loggingConfigSchema,
  telemetryConfigSchema,
} from "./ops-config.js";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");
const nonNegative = z.number().min(0, "must be >= 0");

const workerId = z.string().refine(
  (s) => {
    try {
      checkWorkerId(s);
      return true;
    } catch {
      return false;
    }
  },
  { message: "must be 1-128 characters from A-Z a-z 0-9 _ - (and not 'broadcast')" },
);

const httpUrl = z
  .string()
  .refine((s) => /^https?:\/\/[^/\s]+\/?$/.test(s), { message: "must be http(s)://host:port" });
const ZMQ_ENDPOINT = /^tcp:\/\/[^\s]+:\d+$/;
const zmqEndpoint = z
  .string()
  .refine((s) => ZMQ_ENDPOINT.test(s), { message: "must be tcp://host:port" });

/** A worker whose KV events come from NVIDIA Dynamo's event plane (docs/dynamo.md). */
export const workerDynamoSchema = z.strictObject({
  /**
   * Dynamo's ZMQ event-plane PUB for this worker (its discovery record's event_channels endpoint),
   * or "nats": Dynamo's NATS event plane (`--event-plane nats`), read on the gateway's own NATS
   * connection (`nats`), which must then be configured.
   */
  events: z.string().refine((s) => s === "nats" || ZMQ_ENDPOINT.test(s), {
    message: 'must be tcp://host:port or "nats"',
  }),
  /** Dynamo's id of the worker (decimal, the worker_id of its events), mapped to this kvctl worker. */
  workerId: z.string().regex(/^\d{1,20}$/, "must be Dynamo's decimal worker id"),
  /** Tokens per block (SGLang page size x DCP size); the worker's /server_info page size when unset. */
  blockSize: positiveInt.optional(),
});
export type WorkerDynamoConfig = z.infer<typeof workerDynamoSchema>;

export const workerConfigSchema = z.strictObject({
  id: workerId,
  /** The worker's HTTP base URL (SGLang's --host/--port). */
  url: httpUrl,
  /** ZMQ PUB endpoint of its KV events; defaults to what its /server_info advertises. */
  events: zmqEndpoint.optional(),
  /** ZMQ ROUTER replay endpoint; defaults to what its /server_info advertises. */
  replay: zmqEndpoint.optional(),
  /** Its KV events from Dynamo's event plane instead of SGLang's stream (dynamo-events.ts). */
  dynamo: workerDynamoSchema.optional(),
  /** Keys the gateway sends the worker (auth/config.ts). */
  ...workerCredentialFields,
});

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
  /** Client-side deadlines and caps (ops-config.ts). */
  listener: listenerConfigSchema,
  /** Shutdown on SIGTERM (ops-config.ts). */
  drain: drainConfigSchema,
  /** Latency histograms and trace export (ops-config.ts). */
  telemetry: telemetryConfigSchema,
  /** The gateway's own log: text or levelled JSON with request ids (ops-config.ts). */
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
export type WorkerConfig = z.output<typeof workerConfigSchema>;
export type NatsConfig = z.output<typeof natsConfigSchema>;
export type RoutingConfig = z.output<typeof routingConfigSchema>;

export class GatewayConfigError extends Error {
  override name = "GatewayConfigError";
}

/**
 * The agent policy's admission default: program admission (its retention decisions and restores
 * need a program's tool loop) when the admission limits it needs are given and no mode is named.
 * Without a capacity there is nothing to hold programs to, and admission stays per request.
 */
export function withAgentDefaults(input: unknown): unknown {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return input;
  const c = input as Record<string, unknown>;
  const a = c.admission;
  if (c.policy !== "agent" || a === null || typeof a !== "object" || Array.isArray(a)) return input;
  const adm = a as Record<string, unknown>;
  if (
    adm.mode !== undefined ||
    adm.maxRequestsPerWorker === undefined ||
    adm.capacityTokensPerWorker === undefined
  )
    return input;
  return { ...c, admission: { ...adm, mode: "program" } };
}

/** Validates a configuration object; the error names every bad field by its path. */
export function parseGatewayConfig(input: unknown, source = "config"): GatewayConfig {
  const r = gatewayConfigSchema.safeParse(withAgentDefaults(input));
  if (!r.success) {
    const lines = r.error.issues.map(
      (i) => `  ${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`,
    );
    throw new GatewayConfigError(`${source} is invalid:\n${lines.join("\n")}`);
  }
  const ids = new Set<string>();
  for (const w of r.data.workers) {
    if (ids.has(w.id))
      throw new GatewayConfigError(
        `${source} is invalid:\n  workers: duplicate worker id '${w.id}'`,
      );
    ids.add(w.id);
  }
  const i = r.data.workers.findIndex((w) => w.dynamo?.events === "nats");
  if (i >= 0 && !r.data.nats)
    throw new GatewayConfigError(
      `${source} is invalid:\n  workers.${i}.dynamo.events: "nats" reads Dynamo's NATS event plane on the gateway's NATS connection, and no nats is configured`,
    );
  return r.data;
}

/** Reads a YAML or JSON file (JSON is YAML, so one parser reads both) as an unvalidated object. */
export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new GatewayConfigError(`cannot read config file ${path}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new GatewayConfigError(
      `config file ${path} is not valid YAML/JSON: ${(e as Error).message}`,
    );
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new GatewayConfigError(`config file ${path} must hold a mapping at the top level`);
  }
  return doc as Record<string, unknown>;
}

/** `id=http://host:port[,events=tcp://..][,replay=tcp://..]` (the --worker flag). */
export function parseWorkerFlag(spec: string): Record<string, string> {
  const [first, ...rest] = spec.split(",");
  const eq = first.indexOf("=");
  if (eq <= 0)
    throw new GatewayConfigError(
      `--worker ${spec}: expected id=http://host:port[,events=tcp://host:port][,replay=tcp://host:port]`,
    );
  const out: Record<string, string> = { id: first.slice(0, eq), url: first.slice(eq + 1) };
  for (const part of rest) {
    const e = part.indexOf("=");
    const k = e > 0 ? part.slice(0, e) : part;
    if (k !== "events" && k !== "replay")
      throw new GatewayConfigError(`--worker ${spec}: unknown key '${k}' (events, replay)`);
    out[k] = part.slice(e + 1);
  }
  return out;
}
