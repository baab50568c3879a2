// createGateway(): the library entry behind `kvctl gateway`. It reads its configuration, then
// builds the gateway in dependency order: what it reports to (log, metrics, clock), the policy,
// the NATS link, the session records, the worker plane (workers, their events feeding the index,
// Inspect), the session plane (command path, expiry, idle sweeps), the policy's loop between
// them, the telemetry, and last the HTTP plane that serves, handed the turn path's serveTurn, with
// the passthrough and admin routes registered on its app. Each plane's close is a hook on the
// HTTP server's close, so one close (or a failed start) shuts everything in order. Which folder
// may import which: README.md.
import type { GatewayPolicy, PolicyFactory } from "../contract/policy.js";
import { InMemoryKvIndex, type KvIndex } from "../index/index.js";
import { AuthGate } from "./auth/gate.js";
import { readSecured, secured } from "./auth/secured.js";
import type { ResolvedAuth } from "./auth/table.js";
import { parseGatewayConfig } from "./config/load.js";
import type { GatewayConfig, GatewayConfigInput } from "./config/schema.js";
import type { Clock } from "./core/clock.js";
import type { GatewayLog } from "./core/logger.js";
import { drainThenClose } from "./http/drain.js";
import { registerAdminRoutes } from "./http/admin-routes.js";
import { registerPassthrough } from "./http/passthrough.js";
import { HttpPlane } from "./http/server.js";
import { checkExposure } from "./http/listen-exposure.js";
import { NatsLink } from "./nats-link.js";
import type { PlaneParts } from "./plane-parts.js";
import { resolvePolicy } from "./policy.js";
import { PolicyInlet, policyObserver, tenantCapsOf } from "./policy-loop.js";
import { HoldMetrics } from "./sessions/holds/metrics.js";
import { SessionPlane } from "./sessions/session-plane.js";
import { SessionStore } from "./sessions/session-store.js";
import { openTelemetry, type Reporting, reporting } from "./telemetry/open-telemetry.js";
import type { GatewayMetrics } from "./telemetry/metrics.js";
import type { Telemetry } from "./telemetry/telemetry.js";
import { serveTurn } from "./turn/turn.js";
import type { TurnDeps } from "./turn/turn-deps.js";
import { WorkerPlane } from "./workers/worker-plane.js";
import type { WorkerSet } from "./workers/workers.js";

export interface GatewayOptions {
  /** The configuration (validated here; see config/schema.ts). */
  config: GatewayConfigInput;
  /** The index the workers' KV events feed (default: the in-memory index). */
  index?: KvIndex;
  /**
   * The policy (an object, or a factory called once with the registry and logs), overriding
   * config.policy. Without one, config.policy noop (the default) and log work as named; agent
   * needs `policy: agentPolicy` from kvctl/policy (the gateway does not build it itself).
   */
  policy?: GatewayPolicy | PolicyFactory;
  clock?: Clock;
  rand?: () => number;
  /** Operational log lines (default stderr). */
  log?: (line: string) => void;
  /** Where --json-log decision lines go (default stdout). */
  decisionLog?: (line: string) => void;
}

export interface Gateway {
  readonly url: string;
  readonly port: number;
  readonly config: GatewayConfig;
  readonly metrics: GatewayMetrics;
  readonly index: KvIndex;
  readonly sessions: SessionStore;
  /** The gateway's log (logging.format and level), for the lines an embedding program adds. */
  readonly log: GatewayLog;
  /** Reports sessions idle past sessions.idleAfterSeconds to the policy (a timer calls it too). */
  sweepIdle(): Promise<void>;
  /** One round of worker health checks now. */
  checkHealth(): Promise<void>;
  /** The workers, with their membership operations (add, cordon, remove). */
  readonly workers: WorkerSet;
  /** Reads the listener's TLS files again (SIGHUP); throws, and keeps the old ones, when they do not load. */
  reloadTls(): void;
  /** Resolves when recorded turns and sent commands have settled (tests). */
  settled(): Promise<void>;
  /**
   * SIGTERM's shutdown: not ready, new requests 503, requests and streams under way finish within
   * drain.graceMs (then are cut), then commands and session records are flushed and it closes.
   */
  drain(): Promise<{ cut: number }>;
  close(): Promise<void>;
}

/** The planes, built and wired to each other, not started. */
interface Planes {
  config: GatewayConfig;
  tel: Telemetry;
  index: KvIndex;
  nats: NatsLink;
  workers: WorkerPlane;
  sessions: SessionPlane;
  http: HttpPlane;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const config = parseGatewayConfig(options.config, "gateway config");
  checkExposure(config, "gateway config");
  const { auth, tls } = readSecured(config.auth, config.listen.tls);
  const r = reporting(config.logging, { ...options, jsonLog: config.jsonLog });
  const { log, metrics, clock } = r;
  const policy = policyOf(options, config, r, auth);
  const index = options.index ?? new InMemoryKvIndex();
  const inlet = new PolicyInlet();
  const nats = new NatsLink(config, metrics, log);
  const store = new SessionStore({
    kv: () => nats.kv(),
    configured: nats.configured,
    opTimeoutMs: config.nats?.opTimeoutMs ?? 500,
    metrics,
    clock,
    log,
  });
  const holdMetrics = new HoldMetrics(metrics.registry);
  const observe = inlet.observe;
  const common: PlaneParts = { config, nats, store, clock, metrics, holdMetrics, log, observe };
  const workers = secured(() => new WorkerPlane({ ...common, index, policy }));
  const tenants = auth?.tenants ?? null;
  const decisionLog = r.decisionLog;
  const incarnation = workers.incarnation;
  const sessions = new SessionPlane({ ...common, decisionLog, tenants, incarnation });
  inlet.connect(
    policyObserver(policy, sessions.path, incarnation, log, (o) => workers.radix.observe(o)),
  );
  const tel = await openTelemetry(config.telemetry, r);
  const gate = auth ? new AuthGate(auth, metrics.registry, () => clock.now()) : null;
  const deps: TurnDeps = {
    config,
    workers: workers.workers,
    index,
    sessions: store,
    auth: gate,
    observe,
    recording: sessions.recording,
    rand: options.rand ?? Math.random,
  };
  const beforeScrape = scrapeGauges(config, r, workers, sessions);
  const http = new HttpPlane({
    config,
    deps,
    tel,
    gate,
    workers: workers.workers,
    serveTurn,
    beforeScrape,
    tls,
  });
  registerPassthrough(http.app, deps, tel, config.limits.bodyLimitBytes);
  registerAdminRoutes(http.app, workers.workers, config.drain.graceMs);
  return start({ config, tel, index, nats, workers, sessions, http });
}

/**
 * Each plane's close on the server's, then the start: the workers, NATS, the planes' timers, the
 * listener. A start that fails closes what it started, through the same hooks.
 */
async function start(p: Planes): Promise<Gateway> {
  const { app } = p.http;
  // onClose hooks run last registered first: after the HTTP server has closed, the session plane
  // settles and stops, the spans are flushed, the workers close, and NATS goes last.
  app.addHook("onClose", () => p.nats.close());
  p.workers.closeWith(app);
  app.addHook("onClose", async () => {
    await p.tel.tracer?.close().catch(() => undefined);
  });
  p.sessions.closeWith(app);
  let bound: { url: string; port: number };
  try {
    await p.workers.start();
    await p.nats.start();
    p.sessions.start();
    p.workers.startInspect();
    bound = await p.http.listen();
  } catch (e) {
    await app.close().catch(() => undefined);
    throw e;
  }
  p.sessions.startIdleSweeps();
  return handle(p, bound);
}

function policyOf(
  options: GatewayOptions,
  config: GatewayConfig,
  r: Reporting,
  auth: ResolvedAuth | null,
): GatewayPolicy {
  return resolvePolicy(
    options.policy,
    config,
    {
      config: config.policies,
      registry: r.metrics.registry,
      log: r.log.warn,
      decisionLog: r.decisionLog,
      tenantCaps: tenantCapsOf(auth),
    },
    r.log.info,
  );
}

/** Refreshes the gauges read at scrape time. */
function scrapeGauges(
  config: GatewayConfig,
  r: Reporting,
  workers: WorkerPlane,
  sessions: SessionPlane,
): () => void {
  const activeWindowMs = Math.max(1, config.sessions.idleAfterSeconds) * 1000;
  const { sink, ledger } = sessions.path;
  return () => {
    const now = r.clock.now();
    let active = 0;
    for (const s of sessions.store.localRecords())
      if (now - s.lastActivityMs < activeWindowMs && s.id !== ledger.sessionlessId) active++;
    r.metrics.sessionsActive.set(active);
    r.metrics.commandsQueued.set(sink.queued);
    for (const w of workers.workers.workers) r.metrics.inFlight.set({ worker: w.id }, w.inFlight);
  };
}

function handle(p: Planes, bound: { url: string; port: number }): Gateway {
  const { config, tel, workers, sessions, http } = p;
  let closing: Promise<void> | null = null;
  const gw: Gateway = {
    url: bound.url,
    port: bound.port,
    config,
    metrics: tel.metrics,
    index: p.index,
    sessions: sessions.store,
    log: tel.log,
    sweepIdle: sessions.sweepIdle,
    checkHealth: () => workers.workers.checkHealth(),
    workers: workers.workers,
    drain() {
      return drainThenClose(http.drain, {
        graceMs: config.drain.graceMs,
        metrics: tel.metrics.ops,
        log: tel.log,
        close: () => gw.close(),
      });
    },
    reloadTls: () => http.reloadTls(),
    settled: () => sessions.settled(),
    close() {
      closing ??= http.app.close().then(() => undefined);
      return closing;
    },
  };
  return gw;
}
