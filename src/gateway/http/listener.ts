// The gateway's listening socket, bounded at every door a client can hold open: the headers and the
// whole request must arrive within their deadlines (a body trickled slower is cut with 408 and its
// connection closed, so its file descriptor comes back), a kept-alive connection idles only so long,
// and connections beyond the cap are closed at once. Each cut is counted. The drain gate sits in
// front of both doors (the inference front and fastify): while the gateway drains, a new request is
// answered 503 with Retry-After, and the requests under way are counted until they have finished.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { createServer as createTlsServer } from "node:https";
import type { SecureContextOptions } from "node:tls";
import type { ListenerConfig } from "../config/ops.js";
import { errorBody } from "../core/errors.js";
import type { OpsMetrics } from "../telemetry/ops-metrics.js";
import { bodyDeadlineStarts } from "./body-deadline.js";
import { flavorOfRequest } from "../request/routes.js";
import { onResponseClose } from "../core/response-close.js";

/** Routes that answer while draining: the probes (readiness says draining) and the scrape. */
const DRAIN_EXEMPT = new Set(["/livez", "/readyz", "/health", "/metrics"]);

/** Whether the gateway drains, and the requests still under way. */
export class DrainGate {
  draining = false;
  active = 0;
  private waiters: (() => void)[] = [];

  constructor(private readonly retryAfterSeconds: number) {}

  /** Counts req while it runs; answers it 503 (true) when the gateway drains. */
  admit(req: IncomingMessage, res: ServerResponse, metrics: OpsMetrics): boolean {
    const path = (req.url ?? "/").split("?")[0];
    if (this.draining && !DRAIN_EXEMPT.has(path)) {
      metrics.drainRefused.inc({ route: path.length > 64 ? "other" : path });
      const body = errorBody(
        flavorOfRequest(req.url ?? "/", req.headers),
        "service_unavailable",
        "the gateway is draining (shutting down); retry on another replica",
      );
      res.writeHead(503, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        "retry-after": String(this.retryAfterSeconds),
        connection: "close",
      });
      res.end(body);
      return true;
    }
    this.active++;
    onResponseClose(res, () => {
      this.active--;
      if (this.active === 0) for (const w of this.waiters.splice(0)) w();
    });
    return false;
  }

  /** Resolves true once no request is under way, false when `ms` passed first. */
  idle(ms: number): Promise<boolean> {
    if (this.active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** The node:http server with the listener's bounds, counting what it cuts; `arrive` sees every request first. */
export function createListener(
  l: ListenerConfig,
  gate: DrainGate,
  metrics: OpsMetrics,
  handler: Handler,
  tls: SecureContextOptions | null = null,
  arrive: Handler | null = null,
): Server {
  // With TLS (auth/tls.ts) the same bounds on an https server.
  const make = (
    tls ? (o: object, h: Handler) => createTlsServer({ ...o, ...tls }, h) : createServer
  ) as typeof createServer;
  const server = make(
    {
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.bodyTimeoutMs,
      // How often node looks for requests past their deadlines: often enough that a slow header
      // is cut within a small share of its deadline (a slow body has its own timer, body-deadline.ts).
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(l.headersTimeoutMs / 4))),
    },
    (req, res) => {
      // The request's log line starts its clock first: a request cut at its deadline is logged
      // as lasting at least the deadline.
      arrive?.(req, res);
      bodyDeadlineStarts(server, req, l.bodyTimeoutMs);
      if (!gate.admit(req, res, metrics)) handler(req, res);
    },
  );
  server.keepAliveTimeout = l.idleTimeoutMs;
  server.maxConnections = l.maxConnections;
  server.on("connection", (socket) => {
    metrics.connectionsOpen.inc();
    socket.once("close", () => metrics.connectionsOpen.dec());
  });
  server.on("drop", () => metrics.connectionsRefused.inc());
  // The gateway's clientError handler (client-errors.ts, through fastify) answers and closes the
  // socket; this one counts.
  server.on("clientError", (err: Error & { code?: string }, socket: Duplex) => {
    // node's backstop sweep reports a connection again until its close has gone through.
    if (socket.destroyed) return;
    const reason =
      err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? "request_timeout"
        : err.code === "ECONNRESET"
          ? "reset"
          : "parse_error";
    metrics.listenerCuts.inc({ reason });
  });
  return server;
}
