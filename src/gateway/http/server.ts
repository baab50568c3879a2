// The HTTP plane: the listener (drain gate, deadlines, TLS) and what it serves. The inference
// routes go through the node:http front (inference-front.ts, serving each turn with the serveTurn
// it is handed); everything else through fastify: /health, /metrics, the probes and the hints
// route are the gateway's own, and the routes other planes own (the passthrough of the other
// worker routes, the admin API's membership routes) are registered on its app by the assembly
// (gateway.ts), so the HTTP plane depends on neither the turn path nor the worker plane. Bodies
// are kept as the bytes the client sent (forwarded unchanged unless token ids are asked for) and
// parsed once; malformed JSON, oversized bodies and unknown routes get an error body naming the
// problem. It is the first to close: the inference front stops taking turns, then the server
// closes (what is still open is cut), and only then do the other planes' close hooks run.
import type { Server as TlsServer } from "node:https";
import type { SecureContextOptions } from "node:tls";
import { loadTls, TlsConfigError } from "../auth/tls.js";
import { type AuthGate, principalOf } from "../auth/gate.js";
import { answerClientError } from "./client-errors.js";
import Fastify, { type FastifyInstance, type FastifyError } from "fastify";
import { badJsonMessage, errorBody, tooLargeMessage } from "../core/errors.js";
import { registerHintsRoute } from "./hints-route.js";
import { createInferenceFront, type InferenceFront, type ServeTurn } from "./inference-front.js";
import type { GatewayMetrics } from "../telemetry/metrics.js";
import { flavorOfRequest } from "../request/routes.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "../turn/turn-deps.js";
import type { GatewayConfig } from "../config/schema.js";
import type { WorkerSet } from "../workers/workers.js";
import { createListener, DrainGate } from "./listener.js";
import { registerProbeRoutes } from "./probe-routes.js";
import { requestFields, requestLogger } from "./request-log.js";

export interface ServerParts {
  config: GatewayConfig;
  deps: TurnDeps;
  tel: Telemetry;
  /** The auth gate every request passes first; null when auth is not configured. */
  gate: AuthGate | null;
  /** Serves one inference turn (turn/turn.ts). */
  serveTurn: ServeTurn;
  workers: WorkerSet;
  metrics: GatewayMetrics;
  /** Refreshes the gauges read at scrape time. */
  beforeScrape: () => void;
  /** Drain state shared with the listener (listener.ts). */
  drain: DrainGate;
  /** The listener's certificate and key (auth/tls.ts); null: plain HTTP. */
  tls?: SecureContextOptions | null;
}

/** A body as fastify's routes get it: its bytes and their JSON. */
export interface ParsedBody {
  raw: Buffer;
  json: unknown;
}

function parseBody(
  _req: unknown,
  raw: Buffer,
  done: (err: Error | null, body?: ParsedBody) => void,
): void {
  if (raw.length === 0) return done(null, { raw, json: undefined });
  try {
    done(null, { raw, json: JSON.parse(raw.toString("utf8")) });
  } catch (e) {
    const err = new Error(badJsonMessage(e)) as Error & { statusCode: number; code: string };
    err.statusCode = 400;
    err.code = "KVCTL_BAD_JSON";
    done(err);
  }
}

export function buildServer(
  p: ServerParts,
  bodyLimit: number,
): { app: FastifyInstance; front: InferenceFront } {
  const front = createInferenceFront(p.deps, p.tel, bodyLimit, p.serveTurn);
  const app = Fastify({
    bodyLimit,
    logger: false,
    return503OnClosing: true,
    forceCloseConnections: true,
    // Ids in paths reach their routes, which answer a long one as they answer any id they do not
    // know (fastify's default, 100 characters, turned longer ones into an unknown route).
    routerOptions: { maxParamLength: 8192 },
    clientErrorHandler: answerClientError,
    serverFactory: (handler) => {
      const { gate } = p;
      return createListener(
        p.config.listener,
        p.drain,
        p.metrics.ops,
        (req, res) => {
          if (gate && !gate.admit(req, res)) return;
          if (!front.handle(req, res)) handler(req, res);
        },
        p.tls,
        requestLogger(p.tel),
      );
    },
  });
  app.removeAllContentTypeParsers();
  // Clients (curl -d) often send JSON under another content type: every body is read as JSON.
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit }, parseBody);

  answerFaults(app, p, bodyLimit);
  registerHintsRoute(app, p.deps, p.tel);
  registerOwnRoutes(app, p);
  registerProbeRoutes(app, p.workers, p.drain);
  return { app, front };
}

/** Malformed JSON, oversized bodies, unknown routes and internal errors on the fastify door. */
function answerFaults(app: FastifyInstance, p: ServerParts, bodyLimit: number): void {
  app.setErrorHandler((err: FastifyError, req, reply) => {
    const status = err.statusCode && err.statusCode >= 400 ? err.statusCode : 500;
    const reason =
      err.code === "FST_ERR_CTP_BODY_TOO_LARGE"
        ? "body_too_large"
        : err.code === "KVCTL_BAD_JSON"
          ? "bad_json"
          : status >= 500
            ? "internal"
            : "bad_request";
    if (status < 500) p.metrics.badRequests.inc({ reason });
    const flavor = flavorOfRequest(req.url, req.headers);
    const message = reason === "body_too_large" ? tooLargeMessage(bodyLimit) : err.message;
    if (status >= 500)
      p.tel.log.error(
        `gateway: ${req.method} ${req.url}: ${err.stack ?? err.message}`,
        requestFields(req.raw),
      );
    const type =
      status >= 500
        ? "internal_error"
        : reason === "body_too_large"
          ? "request_too_large"
          : "invalid_request_error";
    reply
      .code(status)
      .header("content-type", "application/json")
      .send(errorBody(flavor, type, message));
  });

  app.setNotFoundHandler((req, reply) => {
    p.metrics.badRequests.inc({ reason: "unknown_route" });
    const flavor = flavorOfRequest(req.url, req.headers);
    reply
      .code(404)
      .header("content-type", "application/json")
      .send(errorBody(flavor, "not_found", `no route ${req.method} ${req.url.split("?")[0]}`));
  });
}

/** /health and /metrics. */
function registerOwnRoutes(app: FastifyInstance, p: ServerParts): void {
  app.get("/health", async (req, reply) => {
    // Worker URLs are internal addresses: only the admin key sees them.
    const admin = principalOf(req.raw).admin;
    const workers = p.workers.workers.map((w) => ({
      id: w.id,
      url: admin ? w.url : undefined,
      healthy: w.healthy,
      stale: w.stale,
      in_flight: w.inFlight,
      page_size: w.scheme?.pageSize ?? null,
    }));
    const ok = workers.some((w) => w.healthy);
    return reply.code(ok ? 200 : 503).send({ status: ok ? "ok" : "no_workers", workers });
  });

  app.get("/metrics", async (_req, reply) => {
    p.beforeScrape();
    const text = await p.metrics.registry.metrics();
    return reply.header("content-type", p.metrics.registry.contentType).send(text);
  });
}

export interface HttpPlaneParts {
  config: GatewayConfig;
  deps: TurnDeps;
  tel: Telemetry;
  gate: AuthGate | null;
  /** The workers, for /health and the probes. */
  workers: WorkerSet;
  serveTurn: ServeTurn;
  /** Refreshes the gauges read at scrape time. */
  beforeScrape: () => void;
  /** The listener's certificate and key (auth/tls.ts); null: plain HTTP. */
  tls: SecureContextOptions | null;
}

export class HttpPlane {
  readonly app: FastifyInstance;
  /** Readiness and the requests under way, for the drain on SIGTERM (drain.ts). */
  readonly drain: DrainGate;

  constructor(private readonly p: HttpPlaneParts) {
    const { config, workers } = p;
    this.drain = new DrainGate(config.drain.retryAfterSeconds);
    const { app, front } = buildServer(
      {
        config,
        deps: p.deps,
        tel: p.tel,
        gate: p.gate,
        serveTurn: p.serveTurn,
        workers,
        metrics: p.tel.metrics,
        beforeScrape: p.beforeScrape,
        drain: this.drain,
        tls: p.tls,
      },
      config.limits.bodyLimitBytes,
    );
    app.addHook("preClose", async () => front.close());
    this.app = app;
  }

  /** Listens on listen.host and listen.port; resolves to the URL clients reach it at. */
  async listen(): Promise<{ url: string; port: number }> {
    const { host, port } = this.p.config.listen;
    await this.app.listen({ host, port });
    const addr = this.app.server.address();
    const bound = typeof addr === "object" && addr ? addr.port : port;
    const h = host.includes(":") ? `[${host}]` : host;
    const scheme = this.p.tls ? "https" : "http";
    return { url: `${scheme}://${h === "0.0.0.0" ? "127.0.0.1" : h}:${bound}`, port: bound };
  }

  /** Reads the listener's TLS files again; throws, and keeps the old ones, when they do not load. */
  reloadTls(): void {
    const c = this.p.config.listen.tls;
    if (!c) throw new TlsConfigError("listen.tls: the gateway was started without TLS");
    (this.app.server as TlsServer).setSecureContext(loadTls(c));
  }
}
