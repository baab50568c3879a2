// createGateway(): the library entry behind `kvctl gateway`. Wires the parts: config -> workers
// (probed, subscribed to their KV events feeding one index) -> NATS link (session bucket,
// control publisher) -> session store -> policy and command sink -> HTTP server.
import type { FastifyInstance } from "fastify";
import { InMemoryKvIndex, type KvIndex } from "../index/index.js";
import type { Server as TlsServer } from "node:https";
import type { SecureContextOptions } from "node:tls";
import { type BlockUse, followSessions } from "./auth/block-use.js";
import { AuthGate } from "./auth/gate.js";
import { AuthConfigError, type ResolvedAuth, resolveAuth } from "./auth/table.js";
import { loadTls, TlsConfigError } from "./auth/tls.js";
import { CredentialError } from "./auth/upstream-credentials.js";
import type { CommandRecorder } from "./sessions/command-record.js";
import type { CommandSink } from "./sessions/command-sink.js";
import type { GatewayConfig, GatewayConfigInput } from "./config/schema.js";
import { GatewayConfigError, parseGatewayConfig } from "./config/load.js";
import { CommandPath } from "./sessions/holds/command-path.js";
import type { HoldLedger } from "./sessions/holds/ledger.js";
import { HoldMetrics } from "./sessions/holds/metrics.js";
import { currentStored, namedPins } from "./sessions/holds/holds.js";
import { GatewayMetrics } from "./telemetry/metrics.js";
import { DynamoNatsPlane } from "./workers/dynamo-events.js";
import { NatsLink } from "./nats-link.js";
import { programRetention } from "./prefetch-send.js";
import type { Observation } from "../contract/observations.js";
import { RadixSessions } from "./workers/radix-sessions.js";
import type {
  GatewayPolicy,
  PolicyCommand,
  PolicyFactory,
  TenantPinCaps,
} from "../contract/policy.js";
import { resolvePolicy } from "./policy.js";
import { idleSweeper } from "./sessions/idle-sweep.js";
import type { InferenceFront } from "./http/inference-front.js";
import { buildServer } from "./http/server.js";
import { DrainGate } from "./http/listener.js";
import { checkExposure } from "./http/listen-exposure.js";
import { LatencyRecorder } from "./telemetry/latency.js";
import { openTracer } from "./telemetry/trace.js";
import { Periodic } from "./core/periodic.js";
import { type GatewayLog, gatewayLogger } from "./core/logger.js";
import { drainThenClose } from "./http/drain.js";
import { SessionExpiry } from "./sessions/session-expiry.js";
import { type Clock, systemClock } from "./core/clock.js";
import { SessionStore } from "./sessions/session-store.js";
import type { Telemetry } from "./telemetry/telemetry.js";
import type { TurnDeps } from "./turn/turn-deps.js";
import { WorkerInspector } from "./workers/worker-inspect.js";
import { WorkerSet } from "./workers/workers.js";

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

/** The gateway's parts, wired to each other but not started. */
interface Parts {
  config: GatewayConfig;
  deps: TurnDeps;
  /** Its span export (tracer) is opened when the gateway starts. */
  tel: Telemetry;
  nats: NatsLink;
  commands: CommandSink;
  recorder: CommandRecorder;
  ledger: HoldLedger;
  inspector: WorkerInspector;
  expiry: SessionExpiry;
  sweepIdle: () => Promise<void>;
  tls: SecureContextOptions | null;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const assembled = assemble(options);
  const tracer = await openTracer(assembled.config.telemetry, assembled.tel.log);
  const parts: Parts = { ...assembled, tel: { ...assembled.tel, tracer } };
  const cleanup = await startLinks(parts);
  const drain = new DrainGate(parts.config.drain.retryAfterSeconds);
  const { app, front } = buildServer(
    {
      deps: parts.deps,
      tel: parts.tel,
      workers: parts.deps.workers,
      metrics: parts.tel.metrics,
      beforeScrape: scrapeGauges(parts),
      drain,
      tls: parts.tls,
    },
    parts.config.limits.bodyLimitBytes,
  );
  try {
    await app.listen({ host: parts.config.listen.host, port: parts.config.listen.port });
  } catch (e) {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
    await tracer?.close().catch(() => undefined);
    throw e;
  }
  return handle(parts, app, front, cleanup, startIdleTimer(parts), drain);
}

/** Keys, worker credentials and TLS files, read at start: a bad one is a config error naming its field. */
function secured<T>(read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof AuthConfigError || e instanceof TlsConfigError || e instanceof CredentialError)
      throw new GatewayConfigError(`gateway config is invalid:\n  ${e.message}`);
    throw e;
  }
}

function assemble(options: GatewayOptions): Parts {
  const config = parseGatewayConfig(options.config, "gateway config");
  checkExposure(config, "gateway config");
  const resolvedAuth = secured(() => (config.auth ? resolveAuth(config.auth) : null));
  const tlsConfig = config.listen.tls;
  const tls = secured(() => (tlsConfig ? loadTls(tlsConfig) : null));
  const logger = gatewayLogger(config.logging, options.log);
  const log = logger.log;
  const clock = options.clock ?? systemClock;
  const metrics = new GatewayMetrics();
  const index = options.index ?? new InMemoryKvIndex();
  const decisionLog = config.jsonLog
    ? (options.decisionLog ?? ((l: string) => process.stdout.write(`${l}\n`)))
    : null;
  const policy = policyOf(options, config, metrics.registry, log, decisionLog, resolvedAuth);
  const nats = new NatsLink(config, metrics, log);
  const sessions = new SessionStore({
    kv: () => nats.kv(),
    configured: nats.configured,
    opTimeoutMs: config.nats?.opTimeoutMs ?? 500,
    metrics,
    clock,
    log,
  });
  const base = { config, log, clock, metrics, index, decisionLog, policy, nats, sessions };
  const loop = assembleLoop(base, resolvedAuth);
  const deps: TurnDeps = {
    config,
    workers: loop.workers,
    index,
    sessions,
    auth: resolvedAuth ? new AuthGate(resolvedAuth, metrics.registry, () => clock.now()) : null,
    observe: loop.observe,
    recording: loop.recording,
    rand: options.rand ?? Math.random,
  };
  const tel: Telemetry = {
    log,
    metrics,
    clock,
    decisionLog,
    requestLog: logger.request,
    nextRequestId: requestIds(),
    latency: config.telemetry.latencyHistograms ? new LatencyRecorder(metrics.ops) : null,
    tracer: null,
  };
  return {
    tls,
    config,
    deps,
    tel,
    nats,
    commands: loop.commands,
    recorder: loop.recorder,
    ledger: loop.ledger,
    inspector: loop.inspector,
    expiry: loop.expiry,
    sweepIdle: idleSweeper(sessions, clock, config.sessions.idleAfterSeconds, loop.observe),
  };
}

/** Request ids: this process's id and a count, base 36. */
function requestIds(): () => string {
  let seq = 0;
  return () => `gw-${process.pid.toString(36)}-${(++seq).toString(36)}`;
}

function policyOf(
  options: GatewayOptions,
  config: GatewayConfig,
  registry: GatewayMetrics["registry"],
  log: GatewayLog,
  decisionLog: ((line: string) => void) | null,
  resolvedAuth: ResolvedAuth | null,
): GatewayPolicy {
  return resolvePolicy(
    options.policy,
    config,
    {
      config: config.policies,
      registry,
      log: log.warn,
      decisionLog,
      tenantCaps: tenantCapsOf(resolvedAuth),
    },
    log.info,
  );
}

interface Base {
  config: GatewayConfig;
  log: GatewayLog;
  clock: Clock;
  metrics: GatewayMetrics;
  index: KvIndex;
  decisionLog: ((line: string) => void) | null;
  policy: GatewayPolicy;
  nats: NatsLink;
  sessions: SessionStore;
}

/** The policy's loop: observations in, commands out along the command path, outcomes back. */
function assembleLoop(b: Base, resolvedAuth: ResolvedAuth | null) {
  const { config, log, clock, metrics, decisionLog, policy, nats, sessions } = b;
  // Every hold-changing command is recorded in its session before it is sent (see holds/ledger.ts).
  const recording = new Map<string, Promise<void>>();
  const holdMetrics = new HoldMetrics(metrics.registry);
  const incarnation = (w: string): string | null => inspector.incarnation(w);
  const path = new CommandPath({
    sessions,
    kv: () => nats.kv(),
    publisher: () => (nats.connected ? nats.publisher : null),
    clock,
    metrics,
    holdMetrics,
    log,
    decisionLog,
    // The loop closes here: an outcome goes back to the policy whose observer feeds this path.
    observe: (o) => observe(o),
    incarnation,
    tenants: resolvedAuth?.tenants ?? null,
    maxQueued: config.limits.commandQueue,
    maxCommands: config.sessions.maxCommands,
    heartbeatMs: config.sessions.heartbeatMs,
    pending: recording,
    sessionTtlSeconds: config.sessions.ttlSeconds,
  });
  // SGLang's session radix cache on the workers that run it: sessions closed where kvctl lets them go.
  const radix = new RadixSessions({
    workers: () => workers.workers,
    registry: metrics.registry,
    log,
    timeoutMs: config.health.timeoutMs,
  });
  const observe = policyObserver(policy, path, incarnation, log, (o) => radix.observe(o));
  nats.whenUp(() => path.sink.flush());
  nats.whenUp(followOnce(nats, path.blockUse, log));
  const workers = assembleWorkers(b, observe, radix, (w) => inspector.restartedFromEvents(w));
  const { inspector, expiry } = assembleWatchers(b, path.ledger, observe, workers, holdMetrics);
  const { sink: commands, recorder, ledger } = path;
  return { recording, observe, workers, commands, recorder, ledger, inspector, expiry };
}

/** Every replica's session records into the block-use table, one watch at a time. */
function followOnce(nats: NatsLink, use: BlockUse, log: GatewayLog): () => void {
  let following = false;
  return () => {
    const kv = nats.kv();
    if (!kv || following) return;
    following = true;
    followSessions(kv, use)
      .catch((e) => log.warn(`gateway: following the session bucket: ${(e as Error).message}`))
      .finally(() => {
        following = false;
      });
  };
}

/** Each worker's Inspect, and the expiry of session records still naming holds. */
function assembleWatchers(
  b: Base,
  ledger: HoldLedger,
  observe: (o: Observation) => void,
  workers: WorkerSet,
  holdMetrics: HoldMetrics,
): { inspector: WorkerInspector; expiry: SessionExpiry } {
  const { config, log, clock, nats, sessions } = b;
  const inspector = new WorkerInspector({
    workers: () => workers.workers,
    publisher: () => (nats.connected ? nats.publisher : null),
    index: b.index,
    observe,
    clock,
    log,
    metrics: holdMetrics,
    intervalMs: config.sessions.inspectMs,
    namedPins: (w) => namedPins(sessions.localRecords(), w),
  });
  const expiry = new SessionExpiry({
    kv: () => nats.kv(),
    ledger,
    observe,
    clock,
    log,
    ttlSeconds: config.sessions.ttlSeconds,
  });
  return { inspector, expiry };
}

/** The workers, their KV events (Dynamo's NATS plane among them) feeding the index. */
function assembleWorkers(
  b: Base,
  observe: (o: Observation) => void,
  radix: RadixSessions,
  restarted: (worker: string) => void,
): WorkerSet {
  const { config, log, clock, metrics, index, policy, nats } = b;
  const dynamoNats = nats.configured
    ? new DynamoNatsPlane({
        connection: () => (nats.connected ? nats.nc : null),
        index,
        metrics,
        log,
      })
    : null;
  if (dynamoNats) nats.whenUp(() => dynamoNats.resubscribe());
  return secured(
    () =>
      new WorkerSet({
        config,
        index,
        metrics,
        clock,
        observe,
        log,
        dynamoNats,
        retention: programRetention(
          policy,
          config,
          () => (nats.connected ? nats.publisher : null),
          metrics,
          log,
        ),
        programReleased: (w, program, why) => radix.release(w, program, why),
        restarted,
      }),
  );
}

/** Each tenant's pin caps from the auth config, for the policy to apply before it pins. */
function tenantCapsOf(auth: ResolvedAuth | null): (tenant: string) => TenantPinCaps | null {
  return (id) => {
    const t = auth?.tenants.get(id);
    return t && (t.maxPinnedBlocks !== undefined || t.maxPinnedBlocksPerSession !== undefined)
      ? { perSession: t.maxPinnedBlocksPerSession ?? null, perTenant: t.maxPinnedBlocks ?? null }
      : null;
  };
}

/**
 * Each observation goes to the policy, and the commands it returns along the command path (named,
 * capped, each hold named in its record, sent); their outcomes come back here as observations.
 * `first` hears each observation before the policy does (the workers' radix sessions).
 */
function policyObserver(
  policy: GatewayPolicy,
  path: CommandPath,
  incarnation: (worker: string) => string | null,
  log: GatewayLog,
  first: (o: Observation) => void,
): (o: Observation) => void {
  return (o) => {
    first(o);
    // Holds on a worker's earlier process are not the session's any more (the policy re-issues them).
    if (o.type === "TurnStarted" && o.stored) {
      o.stored = {
        ...o.stored,
        pins: currentStored(o.stored.pins, incarnation),
        leases: currentStored(o.stored.leases, incarnation),
      };
    }
    path.observed(o);
    let out: readonly PolicyCommand[];
    try {
      out = policy.observe(o);
    } catch (e) {
      log.error(
        `gateway: policy ${policy.name} threw on ${o.type}: ${(e as Error).message} (ignored)`,
      );
      return;
    }
    path.submit(out);
    // Close releases every hold the record names, whichever replica took it (after the policy's own).
    if (o.type === "SessionHint" && o.event === "close") void path.ledger.close(o.sessionId);
  };
}

/** Starts the workers (probed, events subscribed) and the NATS link; what to close, last first. */
async function startLinks(p: Parts): Promise<(() => Promise<void>)[]> {
  const { workers } = p.deps;
  const cleanup: (() => Promise<void>)[] = [];
  try {
    await workers.start();
    cleanup.push(() => workers.close());
    await p.nats.start();
    cleanup.push(() => p.nats.close());
    if (p.nats.configured) {
      p.ledger.start();
      p.inspector.start();
      p.expiry.start();
      if (p.config.sessions.inspectMs > 0) void p.inspector.inspectAll();
    }
    cleanup.push(() => p.ledger.stop());
    cleanup.push(() => p.inspector.stop());
    cleanup.push(() => p.expiry.stop());
  } catch (e) {
    await workers.close().catch(() => undefined);
    await p.nats.close().catch(() => undefined);
    throw e;
  }
  return cleanup;
}

/** Refreshes the gauges read at scrape time. */
function scrapeGauges(p: Parts): () => void {
  const { sessions, workers } = p.deps;
  const { metrics, clock } = p.tel;
  const activeWindowMs = Math.max(1, p.config.sessions.idleAfterSeconds) * 1000;
  return () => {
    const now = clock.now();
    let active = 0;
    for (const r of sessions.localRecords())
      if (now - r.lastActivityMs < activeWindowMs && r.id !== p.ledger.sessionlessId) active++;
    metrics.sessionsActive.set(active);
    metrics.commandsQueued.set(p.commands.queued);
    for (const w of workers.workers) metrics.inFlight.set({ worker: w.id }, w.inFlight);
  };
}

function startIdleTimer(p: Parts): Periodic {
  const idleAfterSeconds = p.config.sessions.idleAfterSeconds;
  const sweeps = new Periodic(
    () => p.sweepIdle(),
    idleAfterSeconds > 0 ? Math.max(1000, (idleAfterSeconds * 1000) / 2) : 0,
    (e) => p.tel.log.warn(`gateway: idle sweep: ${e.message}`),
  );
  sweeps.start();
  return sweeps;
}

/** Resolves once recorded turns, sent commands, their records and the ledger's chains are done. */
async function settledAll(p: Parts): Promise<void> {
  const { deps, commands, recorder, ledger } = p;
  do {
    await Promise.all([...deps.recording.values()]);
    await commands.settled();
    await Promise.all([...recorder.pending]);
    await ledger.settled();
    // A turn that finished meanwhile may have sent commands after the wait above began.
  } while (
    deps.recording.size > 0 ||
    recorder.pending.size > 0 ||
    commands.inFlight > 0 ||
    ledger.busy
  );
}

function handle(
  p: Parts,
  app: FastifyInstance,
  front: InferenceFront,
  cleanup: (() => Promise<void>)[],
  idleTimer: Periodic,
  drain: DrainGate,
): Gateway {
  const { deps, tel, config, commands } = p;
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : config.listen.port;
  const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;
  const gw: Gateway = {
    url: `${p.tls ? "https" : "http"}://${host === "0.0.0.0" ? "127.0.0.1" : host}:${port}`,
    port,
    config,
    metrics: tel.metrics,
    index: deps.index,
    sessions: deps.sessions,
    log: tel.log,
    sweepIdle: p.sweepIdle,
    checkHealth: () => deps.workers.checkHealth(),
    workers: deps.workers,
    drain() {
      return drainThenClose(drain, {
        graceMs: config.drain.graceMs,
        metrics: tel.metrics.ops,
        log: tel.log,
        close: () => gw.close(),
      });
    },
    reloadTls() {
      const c = config.listen.tls;
      if (!c) throw new TlsConfigError("listen.tls: the gateway was started without TLS");
      (app.server as TlsServer).setSecureContext(loadTls(c));
    },
    settled: () => settledAll(p),
    close() {
      closing ??= closeOnce();
      return closing;
    },
  };
  let closing: Promise<void> | null = null;
  async function closeOnce(): Promise<void> {
    idleTimer.cancel();
    front.close();
    await app.close();
    await Promise.all([...deps.recording.values()]).catch(() => undefined);
    await commands.settled().catch(() => undefined);
    await tel.tracer?.close();
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
  return gw;
}
