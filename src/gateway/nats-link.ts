// The gateway's NATS side: one connection for the session bucket (JetStream KV) and the control
// publisher. NATS being down never stops requests: the link reports itself down, the session
// store falls back to its local copies, commands queue; a first connect that fails is retried in
// the background.
import { jetstream } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { type ControlConnectOptions, connectControlPlane } from "../control/connection.js";
import { ControlPublisher } from "../control/publisher.js";
import { secretOf } from "../control/secret-source.js";
import type { GatewayConfig } from "./config/schema.js";
import type { NatsConfig } from "./config/nats.js";
import type { GatewayMetrics } from "./telemetry/metrics.js";
import type { GatewayLog } from "./core/logger.js";

export function connectOptionsOf(n: NatsConfig, name: string): ControlConnectOptions {
  const env = process.env;
  const url = n.url ?? env.KVCTL_NATS_URL ?? "nats://127.0.0.1:4222";
  const o: ControlConnectOptions = {
    servers: url.split(",").map((s) => s.trim()),
    name,
    timeoutMs: Math.max(1000, n.opTimeoutMs),
  };
  const user = n.user ?? env.NATS_USER;
  const pass = secretOf(n.password, env.NATS_PASSWORD, n.passwordFile, "nats.passwordFile");
  const token = secretOf(n.token, env.NATS_TOKEN, n.tokenFile, "nats.tokenFile");
  if (user !== undefined) o.user = user;
  if (pass !== undefined) o.pass = pass;
  if (token !== undefined) o.token = token;
  if (n.nkeySeedFile) o.nkeySeedFile = n.nkeySeedFile;
  if (n.creds) o.credsFile = n.creds;
  if (n.inboxPrefix) o.inboxPrefix = n.inboxPrefix;
  if (n.tlsCa || n.tlsCert || n.tlsKey || n.tlsHandshakeFirst) {
    o.tls = {};
    if (n.tlsCa) o.tls.caFile = n.tlsCa;
    if (n.tlsCert) o.tls.certFile = n.tlsCert;
    if (n.tlsKey) o.tls.keyFile = n.tlsKey;
    if (n.tlsHandshakeFirst) o.tls.handshakeFirst = true;
  }
  return o;
}

export class NatsLink {
  nc: NatsConnection | null = null;
  kvBucket: KV | null = null;
  publisher: ControlPublisher | null = null;
  private up = false;
  private closed = false;
  private retry: NodeJS.Timeout | null = null;
  private onUp: (() => void)[] = [];

  constructor(
    private readonly cfg: GatewayConfig,
    private readonly metrics: GatewayMetrics,
    private readonly log: GatewayLog,
  ) {
    metrics.natsConnected.set(0);
  }

  get configured(): boolean {
    return this.cfg.nats !== undefined;
  }

  get connected(): boolean {
    return this.up;
  }

  /** The session bucket while NATS is up. */
  kv(): KV | null {
    return this.up ? this.kvBucket : null;
  }

  /** Called each time the connection comes (back) up. */
  whenUp(fn: () => void): void {
    this.onUp.push(fn);
  }

  /** First connect; on failure the gateway starts anyway and keeps trying. */
  async start(): Promise<void> {
    if (!this.cfg.nats) return;
    try {
      await this.connect();
    } catch (e) {
      this.log.warn(
        `gateway: NATS unavailable (${(e as Error).message}); serving without shared sessions or commands, retrying`,
      );
      this.scheduleRetry();
    }
  }

  private scheduleRetry(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.connect().catch(() => this.scheduleRetry());
    }, 1000);
    this.retry.unref();
  }

  private async connect(): Promise<void> {
    const n = this.cfg.nats as NatsConfig;
    const nc = await connectControlPlane(connectOptionsOf(n, "kvctl-gateway"));
    try {
      const kvm = new Kvm(jetstream(nc, { timeout: n.opTimeoutMs * 4 }));
      this.kvBucket = await kvm.create(this.cfg.sessions.bucket, {
        history: 1,
        ...(this.cfg.sessions.ttlSeconds > 0 ? { ttl: this.cfg.sessions.ttlSeconds * 1000 } : {}),
      });
    } catch (e) {
      await nc.close().catch(() => undefined);
      throw new Error(
        `session bucket '${this.cfg.sessions.bucket}': ${(e as Error).message} (does the server run JetStream, -js?)`,
      );
    }
    if (this.closed) {
      await nc.close();
      return;
    }
    this.nc = nc;
    this.publisher = new ControlPublisher(nc, {
      subjectPrefix: n.subjectPrefix,
      workers: this.cfg.workers.map((w) => w.id),
      timeoutMs: n.commandTimeoutMs,
      retries: n.commandRetries,
    });
    this.setUp(true);
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") this.setUp(false);
        else if (s.type === "reconnect") this.setUp(true);
      }
    })().catch(() => undefined);
    void nc.closed().then(() => this.setUp(false));
  }

  private setUp(up: boolean): void {
    if (this.up === up) return;
    this.up = up;
    this.metrics.natsConnected.set(up ? 1 : 0);
    if (up) this.log.info("gateway: NATS connected");
    else this.log.warn("gateway: NATS disconnected");
    if (up) for (const fn of this.onUp) fn();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    this.publisher?.close();
    await this.nc?.close().catch(() => undefined);
    this.up = false;
  }
}
