// Connecting to NATS with the auth the control subjects need (they are privileged: whoever can
// publish on them can pin or purge a worker's cache). Options are passed through to nats.js.
import { readFileSync } from "node:fs";
import {
  type Authenticator,
  connect,
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
  nkeyAuthenticator,
} from "@nats-io/transport-node";

export interface NatsTlsOptions {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  /** TLS before the NATS INFO (servers configured with handshake_first). */
  handshakeFirst?: boolean;
  /** Defaults to true; only turn off against a throwaway test server. */
  rejectUnauthorized?: boolean;
}

export interface NatsAuthOptions {
  user?: string;
  pass?: string;
  token?: string;
  /** A file holding an nkey seed (`SU...`). */
  nkeySeedFile?: string;
  /** An nkey seed given inline (prefer the file). */
  nkeySeed?: string;
  /** A decentralised-auth `.creds` file (JWT + seed). */
  credsFile?: string;
  tls?: NatsTlsOptions;
}

export interface ControlConnectOptions extends NatsAuthOptions {
  /** `nats://host:port`, or several. */
  servers: string | string[];
  /** Connection name, shown by the server's monitoring. */
  name?: string;
  /** Pause between reconnect attempts (ms). */
  reconnectTimeWaitMs?: number;
  /** -1 = forever (the default: a control plane should outlive a server restart). */
  maxReconnectAttempts?: number;
  /** Connect timeout (ms). */
  timeoutMs?: number;
  /**
   * Prefix for reply inboxes (default `_INBOX`). Accounts that lock subscriptions down grant the
   * router one prefix (say `_KVCTL_ROUTER`); acks come back under it.
   */
  inboxPrefix?: string;
  /** Keep nats.js's per-request async stack traces (debugging; costs CPU on every request). */
  asyncTraces?: boolean;
}

/** nats.js connection options for the given control-plane options (exported for tests). */
export function natsOptions(opts: ControlConnectOptions): NodeConnectionOptions {
  const authenticators: Authenticator[] = [];
  if (opts.credsFile) authenticators.push(credsAuthenticator(readFileSync(opts.credsFile)));
  const seed = opts.nkeySeedFile ? readFileSync(opts.nkeySeedFile, "utf8").trim() : opts.nkeySeed;
  if (seed) authenticators.push(nkeyAuthenticator(new TextEncoder().encode(seed)));
  const o: NodeConnectionOptions = {
    servers: opts.servers,
    name: opts.name ?? "kvctl",
    reconnect: true,
    maxReconnectAttempts: opts.maxReconnectAttempts ?? -1,
    reconnectTimeWait: opts.reconnectTimeWaitMs ?? 250,
    timeout: opts.timeoutMs ?? 5000,
    // nats.js otherwise builds an Error per request (and one per timer) just to keep the caller's
    // stack: about a quarter of the publisher's CPU at 64 commands in flight. Our errors say
    // which worker and command failed, which is what the stack was for.
    noAsyncTraces: opts.asyncTraces !== true,
  };
  if (opts.inboxPrefix !== undefined) o.inboxPrefix = opts.inboxPrefix;
  if (opts.user !== undefined) o.user = opts.user;
  if (opts.pass !== undefined) o.pass = opts.pass;
  if (opts.token !== undefined) o.token = opts.token;
  if (authenticators.length) o.authenticator = authenticators;
  if (opts.tls) {
    o.tls = {};
    if (opts.tls.caFile) o.tls.caFile = opts.tls.caFile;
    if (opts.tls.certFile) o.tls.certFile = opts.tls.certFile;
    if (opts.tls.keyFile) o.tls.keyFile = opts.tls.keyFile;
    if (opts.tls.handshakeFirst) o.tls.handshakeFirst = true;
    if (opts.tls.rejectUnauthorized === false) o.tls.rejectUnauthorized = false;
  }
  return o;
}

export function connectControlPlane(opts: ControlConnectOptions): Promise<NatsConnection> {
  return connect(natsOptions(opts));
}
