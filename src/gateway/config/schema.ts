// The gateway's configuration: one zod schema for the file (YAML or JSON) and for the options of
// createGateway(), and the types it defines; loading and validating it is load.ts. Objects are
// strict, so a typo in a key is an error naming the key, not a setting silently ignored. Each
// concern's part is a schema of its own (ops.ts, routing.ts, limits.ts, admission.ts, health.ts,
// sessions.ts, nats.ts, workers.ts): a module that reads one part imports that part's type only.
import { z } from "zod";
import { policiesConfigSchema } from "../../contract/policies-config.js";
import { authConfigSchema } from "../auth/config.js";
import { tlsConfigSchema } from "../auth/tls.js";
import {
  drainConfigSchema,
  listenerConfigSchema,
  loggingConfigSchema,
  telemetryConfigSchema,
} from "./ops.js";
import { admissionConfigSchema } from "./admission.js";
import { healthConfigSchema } from "./health.js";
import { limitsConfigSchema } from "./limits.js";
import { natsConfigSchema } from "./nats.js";
import { routingConfigSchema } from "./routing.js";
import { sessionsConfigSchema } from "./sessions.js";
import { workerConfigSchema } from "./workers.js";

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
  limits: limitsConfigSchema,
  admission: admissionConfigSchema,
  health: healthConfigSchema,
  sessions: sessionsConfigSchema,
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
