// `kvctl gateway`: the KV-aware, session-aware HTTP front for SGLang workers (createGateway), from
// a config file (YAML or JSON) and flags; flags override the file.
import { NATS_FLAGS, NATS_FLAGS_HELP } from "../../control/connection-flags.js";
import { warnSecretFlag } from "../../control/secret-source.js";
import { type ArgValues, commandArgs } from "../args.js";
import type { Command } from "../command.js";
import type { GatewayLog } from "../../gateway/core/logger.js";

const HELP = `usage: kvctl gateway [--config FILE] [--worker ID=URL[,events=tcp://..][,replay=tcp://..] ...] [options]
  --config FILE            YAML or JSON file (workers, nats, routing, limits, health, sessions,
                           auth, listen.tls: docs/gateway-security.md); SIGHUP reloads listen.tls
  --worker SPEC            a worker (repeatable; replaces the file's list): id=http://host:port,
                           optionally its KV-event endpoints (default: what its /server_info advertises)
  --listen HOST:PORT       where to serve (default 127.0.0.1:8080); keeps the file's listen.tls.
                           A non-loopback address needs listen.tls and auth: in --config
  --insecure               serve a non-loopback address without TLS or without auth anyway
                           (the gateway says at start what that gives up)
  --policy noop|log|agent  decision policy (default noop; agent: settings under policies: in --config,
                           and program admission when admission: gives its limits)
  --json-log               one JSON line per routing decision and command on stdout
  --body-limit BYTES       largest request body (default 16 MiB)
  --connect-timeout-ms N   time to open a connection to a worker (default 10000)
  --header-timeout-ms N    time to a worker's response headers on a streamed call or one that
                           runs no generation (models, tokenize, count_tokens) (default 300000);
                           a non-streamed generation's headers come with its last byte: see below
  --response-timeout-ms N  longest a non-streamed generation may run (default 0: no limit while
                           the worker passes health; a worker that fails it is drained and its
                           calls end with 502)
  --idle-timeout-ms N      longest silence between two chunks of a worker's answer, streamed or
                           not (default 300000)
                           (a timeout answers 504 with x-should-retry: false: the SDKs do not
                           send the generation again)
  --no-nats                no shared sessions and no commands (this replica alone)
  (with --config and no --worker, the file's worker list is watched and applied while running;
   SIGTERM drains: not ready, new requests 503, requests under way get drain.graceMs to finish)
${NATS_FLAGS_HELP}
  (the NATS server must run JetStream, -js: session records live in a KV bucket)`;

const OPTIONS = {
  ...NATS_FLAGS,
  config: { type: "string" },
  worker: { type: "string", multiple: true },
  listen: { type: "string" },
  insecure: { type: "boolean" },
  policy: { type: "string" },
  "json-log": { type: "boolean" },
  "body-limit": { type: "string" },
  "connect-timeout-ms": { type: "string" },
  "header-timeout-ms": { type: "string" },
  "response-timeout-ms": { type: "string" },
  "idle-timeout-ms": { type: "string" },
  "no-nats": { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

function intFlag(name: string, v: string): number {
  if (!/^\d+$/.test(v)) throw new Error(`--${name} must be a non-negative integer, got '${v}'`);
  return Number(v);
}

type Values = ArgValues<typeof OPTIONS>;

const TIMEOUT_FLAGS = {
  "connect-timeout-ms": "upstreamConnectTimeoutMs",
  "header-timeout-ms": "upstreamHeadersTimeoutMs",
  "response-timeout-ms": "upstreamResponseTimeoutMs",
  "idle-timeout-ms": "upstreamIdleTimeoutMs",
} as const;

/** The timeout flags given, as their `limits:` keys. */
function timeoutFlags(
  values: Partial<Record<keyof typeof TIMEOUT_FLAGS, string>>,
  limits: Record<string, unknown>,
): void {
  for (const [flag, key] of Object.entries(TIMEOUT_FLAGS)) {
    const v = values[flag as keyof typeof TIMEOUT_FLAGS];
    if (v) limits[key] = intFlag(flag, v);
  }
}

/** A config section as a record to merge flags into (absent or not a mapping: empty). */
function asRecord(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : {};
}

/** The config file (if any) with the flags folded in on top; throws naming a bad flag. */
function configFromFlags(
  values: Values,
  gateway: typeof import("../../gateway/index.js"),
): Record<string, unknown> {
  const { GatewayConfigError, parseWorkerFlag, readConfigFile } = gateway;
  const cfg: Record<string, unknown> = values.config ? readConfigFile(values.config) : {};
  if (values.worker?.length) cfg.workers = values.worker.map(parseWorkerFlag);
  if (values.listen) {
    const m = /^(.*):(\d+)$/.exec(values.listen);
    if (!m) throw new GatewayConfigError(`--listen must be HOST:PORT, got '${values.listen}'`);
    // Merged, never replaced: the file's TLS section stays in force.
    cfg.listen = {
      ...asRecord(cfg.listen),
      host: m[1].replace(/^\[|\]$/g, ""),
      port: Number(m[2]),
    };
  }
  if (values.insecure) cfg.listen = { ...asRecord(cfg.listen), insecure: true };
  if (values.policy) cfg.policy = values.policy;
  if (values["json-log"]) cfg.jsonLog = true;
  const limits = { ...((cfg.limits as object) ?? {}) } as Record<string, unknown>;
  if (values["body-limit"]) limits.bodyLimitBytes = intFlag("body-limit", values["body-limit"]);
  timeoutFlags(values, limits);
  if (Object.keys(limits).length) cfg.limits = limits;
  if (values["no-nats"]) delete cfg.nats;
  else {
    const nats = { ...((cfg.nats as object) ?? {}) } as Record<string, unknown>;
    const map: [keyof typeof values, string][] = [
      ["nats-url", "url"],
      ["user", "user"],
      ["password", "password"],
      ["token", "token"],
      ["password-file", "passwordFile"],
      ["token-file", "tokenFile"],
      ["nkey-seed-file", "nkeySeedFile"],
      ["creds", "creds"],
      ["tls-ca", "tlsCa"],
      ["tls-cert", "tlsCert"],
      ["tls-key", "tlsKey"],
      ["tls-handshake-first", "tlsHandshakeFirst"],
      ["subject-prefix", "subjectPrefix"],
      ["inbox-prefix", "inboxPrefix"],
    ];
    for (const [flag, key] of map) if (values[flag] !== undefined) nats[key] = values[flag];
    if (values.password !== undefined) warnSecretFlag("password", "NATS_PASSWORD");
    if (values.token !== undefined) warnSecretFlag("token", "NATS_TOKEN");
    if (Object.keys(nats).length || process.env.KVCTL_NATS_URL) cfg.nats = nats;
  }
  return cfg;
}

/** SIGHUP: the listener's certificate and key read again; a bad pair leaves the old ones serving. */
function reloadTls(gw: { reloadTls(): void; log: GatewayLog }): void {
  try {
    gw.reloadTls();
    gw.log.info("gateway: TLS certificate and key reloaded");
  } catch (e) {
    gw.log.error(
      `gateway: TLS reload failed, still serving the previous certificate: ${(e as Error).message}`,
    );
  }
}

export const command: Command = {
  summary: "KV-aware, session-aware HTTP gateway in front of SGLang workers",
  async run(argv) {
    const parsed = commandArgs(argv, {
      name: "gateway",
      options: OPTIONS,
      help: HELP,
      helpOnError: "line",
    });
    if (typeof parsed === "number") return parsed;
    const { values } = parsed;
    const gateway = await import("../../gateway/index.js");
    const { GatewayConfigError } = gateway;
    const { createGateway } = await import("../../app/gateway.js");
    type ConfigInput = import("../../gateway/index.js").GatewayConfigInput;
    const { WorkerSchemeError } = await import("../../gateway/workers/worker-scheme.js");
    let cfg: Record<string, unknown>;
    try {
      cfg = configFromFlags(values, gateway);
    } catch (e) {
      console.error(`gateway: ${(e as Error).message}`);
      return 2;
    }
    let gw: Awaited<ReturnType<typeof createGateway>>;
    try {
      // Validated inside createGateway, which names every bad field.
      gw = await createGateway({ config: cfg as unknown as ConfigInput });
    } catch (e) {
      if (e instanceof GatewayConfigError || e instanceof WorkerSchemeError) {
        console.error(`gateway: ${e.message}`);
        return 2;
      }
      console.error(`gateway: cannot start: ${(e as Error).message}`);
      return 1;
    }
    gw.log.info(
      `gateway: listening on ${gw.url} for ${gw.config.workers.map((w) => `${w.id}=${w.url}`).join(", ")}`,
    );
    const gaps = gateway.exposureGaps(gw.config.listen.host, gw.config.listen.tls, gw.config.auth);
    if (gaps.length)
      gw.log.warn(
        `gateway: --insecure: listening on ${gw.config.listen.host} ${gateway.exposureCost(gaps)}`,
      );
    const live = gw;
    if (gw.config.listen.tls) process.on("SIGHUP", () => reloadTls(live));
    const watching =
      values.config && !values.worker?.length
        ? gateway.watchWorkerList(values.config, gw.workers, gw.config.drain.graceMs, gw.log)
        : null;
    const signal = await new Promise<string>((resolve) => {
      process.once("SIGINT", () => resolve("SIGINT"));
      process.once("SIGTERM", () => resolve("SIGTERM"));
    });
    watching?.close();
    // A second signal while draining cuts what is left at once.
    const now = () => void gw.close();
    process.once("SIGINT", now);
    process.once("SIGTERM", now);
    gw.log.info(`gateway: ${signal}: draining`);
    const { cut } = await gw.drain();
    return cut > 0 ? 1 : 0;
  },
};
