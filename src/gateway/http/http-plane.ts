// The HTTP plane: the listener (drain gate, deadlines, TLS) and what it serves (server.ts): the
// inference front, the passthrough routes, hints, admin, health, probes and metrics. It is the
// first to close: the inference front stops taking turns, then the server closes (what is still
// open is cut), and only then do the other planes' close hooks run.
import type { Server as TlsServer } from "node:https";
import type { SecureContextOptions } from "node:tls";
import type { FastifyInstance } from "fastify";
import { loadTls, TlsConfigError } from "../auth/tls.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "../turn/turn-deps.js";
import { DrainGate } from "./listener.js";
import { buildServer } from "./server.js";

export interface HttpPlaneParts {
  deps: TurnDeps;
  tel: Telemetry;
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
    const { config, workers } = p.deps;
    this.drain = new DrainGate(config.drain.retryAfterSeconds);
    const { app, front } = buildServer(
      {
        deps: p.deps,
        tel: p.tel,
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
    const { host, port } = this.p.deps.config.listen;
    await this.app.listen({ host, port });
    const addr = this.app.server.address();
    const bound = typeof addr === "object" && addr ? addr.port : port;
    const h = host.includes(":") ? `[${host}]` : host;
    const scheme = this.p.tls ? "https" : "http";
    return { url: `${scheme}://${h === "0.0.0.0" ? "127.0.0.1" : h}:${bound}`, port: bound };
  }

  /** Reads the listener's TLS files again; throws, and keeps the old ones, when they do not load. */
  reloadTls(): void {
    const c = this.p.deps.config.listen.tls;
    if (!c) throw new TlsConfigError("listen.tls: the gateway was started without TLS");
    (this.app.server as TlsServer).setSecureContext(loadTls(c));
  }
}
