// The gateway's workers: their HTTP pools, hash schemes (from /server_info), KV-event consumers
// feeding the shared index, health and load. A worker that fails health (or whose connection is
// refused mid-request) is drained: it takes no traffic and its blocks are forgotten from the
// index until it passes health again. A gap in its event stream makes its index view stale until
// the replay fills it; without a replay (or when the replay could not recover everything) its
// view is cleared instead, since blocks removed during the gap would otherwise stay in it.
import type { Pool } from "undici";
import { admissionGate, type Gate } from "./admission-mode.js";
import { KvEventConsumer } from "../events/consumer.js";
import { indexSink, type KvIndex } from "../index/index.js";
import type { GatewayConfig, WorkerConfig } from "./config.js";
import type { GatewayMetrics } from "./metrics.js";
import type { Observation } from "../contract/observations.js";
import type { WorkerState } from "./router.js";
import type { Clock } from "./session-store.js";
import { callJson, createUpstreamPool } from "./upstream.js";
import { probeMessagesTokenize } from "./worker-features.js";
import { type HashScheme, schemeFromServerInfo, WorkerSchemeError } from "./worker-scheme.js";

export class GatewayWorker {
  readonly id: string;
  readonly url: string;
  readonly pool: Pool;
  scheme: HashScheme | null = null;
  events: string | null;
  replay: string | null;
  topic = "";
  consumer: KvEventConsumer | null = null;
  /** Takes traffic (passed health; not drained). */
  healthy = true;
  stale = false;
  failures = 0;
  inFlight = 0;
  inFlightPromptTokens = 0;
  /** What the worker itself last reported (/v1/loads): requests running or waiting, from every gateway. */
  reported: { requests: number; waitingTokens: number } | null = null;
  /** Cleared when the worker has no /v1/loads. */
  loadsEndpoint = true;
  /** Aborts of the calls under way on it (a drained worker's calls end at once). */
  readonly calls = new Set<() => void>();
  /** It serves kvctl's /kvctl/v1/messages/tokenize (probed at start; see worker-features.ts). */
  messagesTokenize = true;
  /** Requests this gateway runs on the worker at once (the rest wait here); null: no limit. */
  readonly gate: Gate | null;

  constructor(c: WorkerConfig, cfg: GatewayConfig) {
    this.id = c.id;
    this.url = c.url.replace(/\/$/, "");
    this.gate = admissionGate(cfg.admission);
    this.events = c.events ?? null;
    this.replay = c.replay ?? null;
    this.pool = createUpstreamPool(this.url, {
      connections: cfg.limits.connectionsPerWorker,
      connectTimeoutMs: cfg.limits.upstreamConnectTimeoutMs,
      headersTimeoutMs: cfg.limits.upstreamHeadersTimeoutMs,
      bodyTimeoutMs: cfg.limits.upstreamIdleTimeoutMs,
    });
  }

  /** Load for routing: what this gateway has in flight, or the worker's own count when higher (other replicas' traffic). */
  state(): WorkerState {
    const r = this.reported;
    return {
      id: this.id,
      inFlight: r ? Math.max(this.inFlight, r.requests) : this.inFlight,
      inFlightPromptTokens: r ? Math.max(this.inFlightPromptTokens, r.waitingTokens) : this.inFlightPromptTokens,
      stale: this.stale,
      pageSize: this.scheme?.pageSize ?? 1,
    };
  }
}

export interface WorkerSetOptions {
  config: GatewayConfig;
  index: KvIndex;
  metrics: GatewayMetrics;
  clock: Clock;
  observe: (o: Observation) => void;
  log: (line: string) => void;
}

export class WorkerSet {
  readonly workers: GatewayWorker[];
  private readonly byId = new Map<string, GatewayWorker>();
  private timer: NodeJS.Timeout | null = null;
  private checking = false;

  constructor(private readonly o: WorkerSetOptions) {
    this.workers = o.config.workers.map((c) => new GatewayWorker(c, o.config));
    for (const w of this.workers) {
      this.byId.set(w.id, w);
      o.metrics.workerHealthy.set({ worker: w.id }, 1);
      o.metrics.workerStale.set({ worker: w.id }, 0);
      o.metrics.inFlight.set({ worker: w.id }, 0);
    }
  }

  get(id: string): GatewayWorker | undefined {
    return this.byId.get(id);
  }

  /** Workers taking traffic. */
  available(): GatewayWorker[] {
    return this.workers.filter((w) => w.healthy);
  }

  /** Reads every worker's /server_info (refusing one whose hashes we cannot reproduce), then subscribes to its events. */
  async start(): Promise<void> {
    const { config } = this.o;
    if (config.probeWorkers) {
      await Promise.all(
        this.workers.map(async (w) => {
          let r: Awaited<ReturnType<typeof callJson>>;
          try {
            r = await callJson(w.pool, "GET", "/server_info", undefined, config.health.timeoutMs * 5);
          } catch (e) {
            throw new WorkerSchemeError(`worker ${w.id} (${w.url}): /server_info failed: ${(e as Error).message}`);
          }
          if (r.status !== 200 || !r.json || typeof r.json !== "object") {
            throw new WorkerSchemeError(`worker ${w.id} (${w.url}): /server_info answered ${r.status}: ${r.text.slice(0, 200)}`);
          }
          const ad = schemeFromServerInfo(w.id, w.url, r.json as Record<string, unknown>);
          w.scheme = ad.scheme;
          w.events ??= ad.events;
          w.replay ??= ad.replay;
          w.topic = ad.topic;
          if (!ad.cacheReport) this.o.log(`gateway: worker ${w.id} runs without --enable-cache-report: its cache hits are not counted`);
          w.messagesTokenize = await probeMessagesTokenize(w.id, w.pool, config.health.timeoutMs * 5, this.o.log);
        }),
      );
    }
    for (const w of this.workers) {
      if (w.events) await this.subscribe(w);
      if (w.scheme) this.o.observe({ type: "WorkerJoined", at: this.o.clock.now(), worker: w.id, pageSize: w.scheme.pageSize });
    }
    if (config.health.intervalMs > 0) {
      this.timer = setInterval(() => void this.checkHealth(), config.health.intervalMs);
      this.timer.unref();
    }
  }

  private async subscribe(w: GatewayWorker): Promise<void> {
    const { index, metrics, clock, observe, log } = this.o;
    const sink = indexSink(index, log);
    const c = new KvEventConsumer({
      endpoint: w.events as string,
      worker: w.id,
      replayEndpoint: w.replay ?? undefined,
      topic: w.topic,
      sink: {
        ...sink,
        applyBatch: (worker, batch, seq) => {
          metrics.zmqEvents.inc({ worker });
          sink.applyBatch?.(worker, batch, seq);
        },
        applyFrame: sink.applyFrame
          ? (worker, payload, seq, withEvents) => {
              metrics.zmqEvents.inc({ worker });
              return (sink.applyFrame as NonNullable<typeof sink.applyFrame>)(worker, payload, seq, withEvents);
            }
          : undefined,
        resetWorker: (worker) => {
          sink.resetWorker(worker);
          observe({ type: "WorkerCleared", at: clock.now(), worker, reason: "restart" });
        },
      },
      log,
    });
    c.on("gap", (g) => {
      metrics.zmqGaps.inc({ worker: w.id });
      if (w.replay) {
        this.setStale(w, true);
        observe({ type: "WorkerStale", at: clock.now(), worker: w.id, missing: Number(g.missing) });
      } else {
        log(`gateway: worker ${w.id}: ${g.missing} KV-event batch(es) lost and no replay endpoint; forgetting its blocks`);
        index.clearWorker(w.id);
        observe({ type: "WorkerCleared", at: clock.now(), worker: w.id, reason: "gap" });
      }
    });
    c.on("replay", (r) => {
      if (!r.ok || r.unrecovered > 0n) {
        log(`gateway: worker ${w.id}: replay left ${r.unrecovered} batch(es) unrecovered; forgetting its blocks`);
        index.clearWorker(w.id);
        observe({ type: "WorkerCleared", at: clock.now(), worker: w.id, reason: "gap" });
      }
      this.setStale(w, false);
    });
    c.on("error", (e) => log(`gateway: worker ${w.id}: KV-event consumer: ${e.message}`));
    await c.start();
    w.consumer = c;
  }

  private setStale(w: GatewayWorker, stale: boolean): void {
    w.stale = stale;
    this.o.metrics.workerStale.set({ worker: w.id }, stale ? 1 : 0);
  }

  /** Stops routing to `w` and forgets its blocks (failed health, or its connection refused). */
  drain(w: GatewayWorker, why: string): void {
    if (!w.healthy) return;
    w.healthy = false;
    w.failures = Math.max(w.failures, this.o.config.health.failures);
    this.o.metrics.workerHealthy.set({ worker: w.id }, 0);
    this.o.index.clearWorker(w.id);
    for (const abort of [...w.calls]) abort();
    this.o.log(`gateway: worker ${w.id} drained (${why}); its sessions re-route and its blocks are forgotten`);
    this.o.observe({ type: "WorkerCleared", at: this.o.clock.now(), worker: w.id, reason: "drained" });
  }

  /** One round of health checks (the timer calls it; tests may too). */
  async checkHealth(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      await Promise.all(this.workers.map((w) => this.checkOne(w)));
    } finally {
      this.checking = false;
    }
  }

  private async checkOne(w: GatewayWorker): Promise<void> {
    let ok = false;
    let why = "";
    try {
      const r = await callJson(w.pool, "GET", "/health", undefined, this.o.config.health.timeoutMs);
      ok = r.status === 200;
      why = `/health answered ${r.status}`;
    } catch (e) {
      why = `/health failed: ${(e as Error).message}`;
    }
    if (ok) {
      w.failures = 0;
      if (w.loadsEndpoint) await this.readLoad(w);
      if (!w.healthy) {
        w.healthy = true;
        this.o.metrics.workerHealthy.set({ worker: w.id }, 1);
        this.o.log(`gateway: worker ${w.id} passes health again; taking traffic`);
        this.o.observe({ type: "WorkerJoined", at: this.o.clock.now(), worker: w.id, pageSize: w.scheme?.pageSize ?? 1 });
      }
      return;
    }
    w.failures++;
    if (w.failures >= this.o.config.health.failures) this.drain(w, why);
  }

  /** SGLang's /v1/loads (core section): running + waiting requests and uncached waiting tokens. */
  private async readLoad(w: GatewayWorker): Promise<void> {
    try {
      const r = await callJson(w.pool, "GET", "/v1/loads?include=core", undefined, this.o.config.health.timeoutMs);
      if (r.status === 404) {
        w.loadsEndpoint = false;
        return;
      }
      const loads = (r.json as { loads?: Record<string, unknown>[] } | null)?.loads;
      if (r.status !== 200 || !Array.isArray(loads)) return;
      let requests = 0;
      let waitingTokens = 0;
      for (const l of loads) {
        const core = (typeof l.core === "object" && l.core !== null ? l.core : l) as Record<string, unknown>;
        requests += Number(core.num_running_reqs ?? 0) + Number(core.num_waiting_reqs ?? 0);
        waitingTokens += Number(core.num_waiting_uncached_tokens ?? 0);
      }
      if (Number.isFinite(requests) && Number.isFinite(waitingTokens)) w.reported = { requests, waitingTokens };
    } catch {
      // Load is advisory: routing goes on with this gateway's own counts.
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await Promise.all(this.workers.map(async (w) => {
      await w.consumer?.close();
      await w.pool.destroy().catch(() => undefined);
    }));
  }
}
