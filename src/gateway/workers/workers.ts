// The gateway's workers: their HTTP pools, hash schemes (from /server_info), KV-event consumers
// feeding the shared index, health and load. A worker that fails health (or whose connection is
// refused mid-request) is drained: it takes no traffic and its blocks are forgotten from the
// index until it passes health again. A gap in its event stream makes its index view stale until
// the replay fills it; without a replay (or when the replay could not recover everything) its
// view is cleared instead, since blocks removed during the gap would otherwise stay in it.
// Membership changes at runtime: a worker that does not answer at start (or is added later) joins
// once it answers; an operator may drain one (no new traffic, its calls finish) or remove it.
import { type EventSink, KvEventConsumer } from "../../events/consumer.js";
import { type DynamoNatsPlane, subscribeDynamoEvents } from "./dynamo-events.js";
import { indexSink, type KvIndex } from "../../index/index.js";
import type { GatewayConfig } from "../config/schema.js";
import type { WorkerConfig } from "../config/workers.js";
import type { GatewayMetrics } from "../telemetry/metrics.js";
import type { Observation } from "../../contract/observations.js";
import { callJson } from "./upstream.js";
import { probeMessagesTokenize, servesStreamOutputIds } from "./worker-features.js";
import { runsSessionRadix } from "./radix-sessions.js";
import { schemeFromServerInfo } from "./worker-scheme.js";
import type { GatewayLog } from "../core/logger.js";
import { Periodic } from "../core/periodic.js";
import {
  GatewayWorker,
  type ProgramReleased,
  type RetentionFor,
  tokenizeTimeoutMs,
} from "./worker.js";

/** A worker that did not answer its probe (it may come up later). */
export class WorkerDownError extends Error {
  override name = "WorkerDownError";
}

/** A membership change that cannot be made (unknown worker, duplicate id). */
export class MembershipError extends Error {
  override name = "MembershipError";
}

export interface WorkerSetOptions {
  config: GatewayConfig;
  index: KvIndex;
  metrics: GatewayMetrics;
  /** The gateway's clock (ms). */
  now: () => number;
  observe: (o: Observation) => void;
  log: GatewayLog;
  /** The policy's retention for program admission (per worker), if it decides one. */
  retention?: RetentionFor | null;
  /** A worker's event stream started over (a new process): handled as its Inspect's restart is. */
  restarted?: (worker: string) => void;
  /** Dynamo's NATS event plane on the gateway's NATS connection (when NATS is configured). */
  dynamoNats?: DynamoNatsPlane | null;
  /** Program admission let a program go, or paused it under pressure (its session's KV is no longer kept). */
  programReleased?: ProgramReleased | null;
}

export class WorkerSet {
  readonly workers: GatewayWorker[] = [];
  readonly metrics: GatewayMetrics;
  private readonly byId = new Map<string, GatewayWorker>();
  /** The health checks, every health.intervalMs once started. */
  private readonly health: Periodic;
  private checking = false;
  private readonly retention: RetentionFor | null;

  constructor(private readonly o: WorkerSetOptions) {
    this.metrics = o.metrics;
    this.health = new Periodic(
      () => this.checkHealth(),
      o.config.health.intervalMs,
      (e) => o.log.warn(`gateway: health check: ${e.message}`),
    );
    this.retention =
      o.config.admission.mode === "program" && o.config.admission.retention
        ? (o.retention ?? null)
        : null;
    for (const c of o.config.workers)
      this.track(new GatewayWorker(c, o.config, this.retention, o.programReleased ?? null));
  }

  private track(w: GatewayWorker): void {
    this.workers.push(w);
    this.byId.set(w.id, w);
    this.o.metrics.workerHealthy.set({ worker: w.id }, 1);
    this.o.metrics.workerStale.set({ worker: w.id }, 0);
    this.o.metrics.inFlight.set({ worker: w.id }, 0);
  }

  get(id: string): GatewayWorker | undefined {
    return this.byId.get(id);
  }

  /** Workers taking traffic. */
  available(): GatewayWorker[] {
    return this.workers.filter((w) => w.healthy && !w.cordoned);
  }

  /**
   * Joins every worker: one whose hashes we cannot reproduce is refused (the gateway does not
   * start); one that does not answer yet is left down and joins when it answers.
   */
  async start(): Promise<void> {
    await Promise.all(this.workers.map((w) => this.join(w)));
    this.health.start();
  }

  /** Reads w's /server_info and subscribes to its events; false (w left down) when it does not answer. */
  private join(w: GatewayWorker): Promise<boolean> {
    // One join at a time: the health checks and an admin add may both try a new worker.
    w.joining ??= this.joinOnce(w).finally(() => {
      w.joining = null;
    });
    return w.joining;
  }

  private async joinOnce(w: GatewayWorker): Promise<boolean> {
    // A Dynamo worker with its block size given needs nothing from /server_info (a Dynamo
    // frontend in front of it serves none).
    if (this.o.config.probeWorkers && !w.dynamo?.blockSize) {
      try {
        await this.probe(w);
      } catch (e) {
        if (!(e instanceof WorkerDownError)) throw e;
        if (w.healthy || w.failures === 0)
          this.o.log.warn(`gateway: ${e.message}; it joins when it answers`);
        w.healthy = false;
        w.failures = Math.max(1, w.failures);
        this.o.metrics.workerHealthy.set({ worker: w.id }, 0);
        return false;
      }
    }
    if (w.dynamo) {
      const on = {
        worker: w.id,
        config: w.dynamo,
        pageSize: w.scheme?.pageSize ?? null,
        stale: (why: string) => {
          if (!w.stale)
            this.o.log.warn(
              `gateway: worker ${w.id}: its Dynamo KV events are not trusted (${why}); its overlap counts as none`,
            );
          this.setStale(w, true);
        },
      };
      w.dynamoEvents ??=
        w.dynamo.events === "nats"
          ? this.natsPlane().add(on)
          : subscribeDynamoEvents({
              ...on,
              index: this.o.index,
              metrics: this.o.metrics,
              log: this.o.log.warn,
            });
    } else if (w.events && !w.consumer) await this.subscribe(w);
    w.joined = true;
    if (w.scheme)
      this.o.observe({
        type: "WorkerJoined",
        at: this.o.now(),
        worker: w.id,
        pageSize: w.scheme.pageSize,
      });
    return true;
  }

  private async probe(w: GatewayWorker): Promise<void> {
    const timeoutMs = tokenizeTimeoutMs(this.o.config);
    let r: Awaited<ReturnType<typeof callJson>>;
    try {
      r = await callJson(w.pool, "GET", "/server_info", undefined, timeoutMs);
    } catch (e) {
      throw new WorkerDownError(
        `worker ${w.id} (${w.url}): /server_info failed: ${(e as Error).message}`,
      );
    }
    if (r.status !== 200 || !r.json || typeof r.json !== "object") {
      throw new WorkerDownError(
        `worker ${w.id} (${w.url}): /server_info answered ${r.status}: ${r.text.slice(0, 200)}`,
      );
    }
    const ad = schemeFromServerInfo(w.id, w.url, r.json as Record<string, unknown>);
    w.scheme = ad.scheme;
    w.events ??= ad.events;
    w.replay ??= ad.replay;
    w.topic = ad.topic;
    if (!ad.cacheReport)
      this.o.log.warn(
        `gateway: worker ${w.id} runs without --enable-cache-report: its cache hits are not counted`,
      );
    w.streamOutputIds = servesStreamOutputIds(r.json as Record<string, unknown>);
    w.sessionRadix = runsSessionRadix(r.json as Record<string, unknown>);
    const pool = (r.json as Record<string, unknown>).max_total_num_tokens;
    w.deviceTokens =
      Number.isSafeInteger(pool) && (pool as number) > 0 ? (pool as number) : undefined;
    w.messagesTokenize = await probeMessagesTokenize(w.id, w.pool, timeoutMs, this.o.log);
  }

  /**
   * Adds a worker at runtime; it takes traffic once it answers (at once when it does now). A
   * worker whose hashes we cannot reproduce is refused (WorkerSchemeError) and not kept.
   */
  async add(c: WorkerConfig): Promise<GatewayWorker> {
    if (this.byId.has(c.id)) throw new MembershipError(`worker '${c.id}' is already a member`);
    if (c.dynamo?.events === "nats" && !this.o.dynamoNats)
      throw new MembershipError(
        `worker '${c.id}': dynamo.events "nats" reads Dynamo's NATS event plane on the gateway's NATS connection, and no nats is configured`,
      );
    const w = new GatewayWorker(c, this.o.config, this.retention, this.o.programReleased ?? null);
    this.track(w);
    try {
      if (await this.join(w)) this.markUp(w, "added");
    } catch (e) {
      await this.forget(w);
      throw e;
    }
    return w;
  }

  /** An operator's drain: no new traffic (its sessions move), calls under way finish; undone by undrain. */
  cordon(id: string, on: boolean): GatewayWorker {
    const w = this.byId.get(id);
    if (!w) throw new MembershipError(`no worker '${id}'`);
    if (w.cordoned === on) return w;
    w.cordoned = on;
    this.o.log.info(
      `gateway: worker ${id} ${on ? "drained by an operator: no new traffic, its calls under way finish" : "undrained: taking traffic"}`,
    );
    if (on)
      this.o.observe({
        type: "WorkerCleared",
        at: this.o.now(),
        worker: id,
        reason: "drained",
      });
    return w;
  }

  /** Removes a worker: drained first, its calls under way given graceMs to finish, then cut. */
  async remove(id: string, graceMs: number): Promise<void> {
    const w = this.cordon(id, true);
    const end = Date.now() + graceMs;
    while (w.inFlight > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    for (const abort of [...w.calls]) abort();
    this.o.index.clearWorker(id);
    await this.forget(w);
    this.o.log.info(`gateway: worker ${id} removed`);
  }

  private natsPlane(): DynamoNatsPlane {
    // parseGatewayConfig and add() refuse a "nats" worker when the gateway has no NATS.
    if (!this.o.dynamoNats)
      throw new MembershipError('dynamo.events "nats" needs the gateway\'s NATS connection (nats)');
    return this.o.dynamoNats;
  }

  private async forget(w: GatewayWorker): Promise<void> {
    const i = this.workers.indexOf(w);
    if (i >= 0) this.workers.splice(i, 1);
    this.byId.delete(w.id);
    for (const g of [
      this.o.metrics.workerHealthy,
      this.o.metrics.workerStale,
      this.o.metrics.inFlight,
    ])
      g.remove({ worker: w.id });
    await w.consumer?.close().catch(() => undefined);
    await w.dynamoEvents?.close().catch(() => undefined);
    await w.pool.destroy().catch(() => undefined);
  }

  private markUp(w: GatewayWorker, how: string): void {
    w.failures = 0;
    if (w.healthy) return;
    w.healthy = true;
    this.o.metrics.workerHealthy.set({ worker: w.id }, 1);
    this.o.log.info(`gateway: worker ${w.id} ${how}; taking traffic`);
  }

  private async subscribe(w: GatewayWorker): Promise<void> {
    const { index, metrics, now, observe, log } = this.o;
    const c = new KvEventConsumer({
      endpoint: w.events as string,
      worker: w.id,
      replayEndpoint: w.replay ?? undefined,
      topic: w.topic,
      sink: this.countedSink(),
      log: log.warn,
    });
    c.on("gap", (g) => {
      metrics.zmqGaps.inc({ worker: w.id });
      if (w.replay) {
        this.setStale(w, true);
        observe({ type: "WorkerStale", at: now(), worker: w.id, missing: Number(g.missing) });
      } else {
        log.warn(
          `gateway: worker ${w.id}: ${g.missing} KV-event batch(es) lost and no replay endpoint; forgetting its blocks`,
        );
        index.clearWorker(w.id);
        observe({ type: "WorkerCleared", at: now(), worker: w.id, reason: "gap" });
      }
    });
    c.on("replay", (r) => {
      if (!r.ok || r.unrecovered > 0n) {
        log.warn(
          `gateway: worker ${w.id}: replay left ${r.unrecovered} batch(es) unrecovered; forgetting its blocks`,
        );
        index.clearWorker(w.id);
        observe({ type: "WorkerCleared", at: now(), worker: w.id, reason: "gap" });
      }
      this.setStale(w, false);
    });
    c.on("error", (e) => log.warn(`gateway: worker ${w.id}: KV-event consumer: ${e.message}`));
    c.on("refused", () => metrics.ops.kvEventsRefused.inc({ worker: w.id }));
    await c.start();
    w.consumer = c;
  }

  /** The index as a consumer's sink: each batch counted, a restart told to the policy. */
  private countedSink(): EventSink {
    const { index, metrics, now, observe, log } = this.o;
    // Both report problems with a worker's event stream.
    const sink = indexSink(index, log.warn);
    return {
      ...sink,
      applyBatch: (worker, batch, seq) => {
        metrics.zmqEvents.inc({ worker });
        sink.applyBatch?.(worker, batch, seq);
      },
      applyFrame: sink.applyFrame
        ? (worker, payload, seq, withEvents) => {
            metrics.zmqEvents.inc({ worker });
            return (sink.applyFrame as NonNullable<typeof sink.applyFrame>)(
              worker,
              payload,
              seq,
              withEvents,
            );
          }
        : undefined,
      resetWorker: (worker) => {
        sink.resetWorker(worker);
        observe({ type: "WorkerCleared", at: now(), worker, reason: "restart" });
        this.o.restarted?.(worker);
      },
    };
  }

  private setStale(w: GatewayWorker, stale: boolean): void {
    w.stale = stale;
    this.o.metrics.workerStale.set({ worker: w.id }, stale ? 1 : 0);
  }

  /** Stops routing to `w` and forgets its blocks. Its calls under way are cut at once when its
   * connection was refused (the process is gone), else only if it still fails health after
   * `health.cutCallsAfterMs` (a busy worker answering /health late keeps its work). */
  drain(w: GatewayWorker, why: string, cut: "now" | "after-grace" = "now"): void {
    if (w.healthy) {
      w.healthy = false;
      w.failures = Math.max(w.failures, this.o.config.health.failures);
      this.o.metrics.workerHealthy.set({ worker: w.id }, 0);
      this.o.index.clearWorker(w.id);
      const grace =
        cut === "after-grace" && w.calls.size > 0 ? this.o.config.health.cutCallsAfterMs : 0;
      this.o.log.warn(
        `gateway: worker ${w.id} drained (${why}); its sessions re-route and its blocks are forgotten` +
          `${grace > 0 ? `; its ${w.calls.size} calls under way are cut if it still fails health in ${grace} ms` : ""}`,
      );
      this.o.observe({
        type: "WorkerCleared",
        at: this.o.now(),
        worker: w.id,
        reason: "drained",
      });
      w.drainedAt = this.o.now();
      if (grace > 0) return;
    }
    if (
      w.drainedAt !== null &&
      (cut === "now" || this.o.now() - w.drainedAt >= this.o.config.health.cutCallsAfterMs)
    )
      this.cutCalls(w);
  }

  private cutCalls(w: GatewayWorker): void {
    w.drainedAt = null;
    if (w.calls.size)
      this.o.log.warn(
        `gateway: worker ${w.id} still failing: its ${w.calls.size} calls under way end with 502`,
      );
    for (const abort of [...w.calls]) abort();
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
    if (!w.joined) {
      if (w.joining) return;
      try {
        if (await this.join(w)) {
          this.o.metrics.ops.membership.inc({ change: "joined" });
          this.markUp(w, "answers now and joined");
        }
      } catch (e) {
        if (w.failures++ === 1)
          this.o.log.warn(`gateway: worker ${w.id} cannot join: ${(e as Error).message}`);
      }
      return;
    }
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
      w.drainedAt = null;
      if (w.loadsEndpoint) await this.readLoad(w);
      if (!w.healthy) {
        w.healthy = true;
        this.o.metrics.workerHealthy.set({ worker: w.id }, 1);
        this.o.log.info(`gateway: worker ${w.id} passes health again; taking traffic`);
        this.o.observe({
          type: "WorkerJoined",
          at: this.o.now(),
          worker: w.id,
          pageSize: w.scheme?.pageSize ?? 1,
        });
      }
      return;
    }
    w.failures++;
    if (w.failures >= this.o.config.health.failures) this.drain(w, why, "after-grace");
  }

  /** SGLang's /v1/loads (core section): running + waiting requests and uncached waiting tokens. */
  private async readLoad(w: GatewayWorker): Promise<void> {
    try {
      const r = await callJson(
        w.pool,
        "GET",
        "/v1/loads?include=core",
        undefined,
        this.o.config.health.timeoutMs,
      );
      if (r.status === 404) {
        w.loadsEndpoint = false;
        return;
      }
      const loads = (r.json as { loads?: Record<string, unknown>[] } | null)?.loads;
      if (r.status !== 200 || !Array.isArray(loads)) return;
      let requests = 0;
      let waitingTokens = 0;
      for (const l of loads) {
        const core = (typeof l.core === "object" && l.core !== null ? l.core : l) as Record<
          string,
          unknown
        >;
        requests += Number(core.num_running_reqs ?? 0) + Number(core.num_waiting_reqs ?? 0);
        waitingTokens += Number(core.num_waiting_uncached_tokens ?? 0);
      }
      if (Number.isFinite(requests) && Number.isFinite(waitingTokens))
        w.reported = { requests, waitingTokens };
    } catch {
      // Load is advisory: routing goes on with this gateway's own counts.
    }
  }

  async close(): Promise<void> {
    // A health round under way is not waited for: closing the workers below ends its calls.
    this.health.cancel();
    await Promise.all(
      this.workers.map(async (w) => {
        await w.consumer?.close();
        await w.dynamoEvents?.close();
        await w.pool.destroy().catch(() => undefined);
      }),
    );
  }
}
