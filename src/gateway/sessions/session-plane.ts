// The session plane: the session records every replica shares (session-store.ts), the command
// path that names each hold in its record before it is sent (holds/command-path.ts), the expiry
// of records still naming holds, and the idle sweeps that tell the policy a session went quiet.
// Its close runs once the HTTP server has closed: the turns being recorded and the commands under
// way settle, then its timers stop (the ledger withdrawing its heartbeat while NATS is still up).
import type { FastifyInstance } from "fastify";
import type { BlockUse } from "../auth/block-use.js";
import type { TenantConfig } from "../auth/config.js";
import { Periodic } from "../core/periodic.js";
import type { GatewayLog } from "../core/logger.js";
import type { NatsLink } from "../nats-link.js";
import type { PlaneParts } from "../plane-parts.js";
import { CommandPath } from "./holds/command-path.js";
import { idleSweeper } from "./idle-sweep.js";
import { SessionExpiry } from "./session-expiry.js";
import { followSessions, type SessionStore } from "./session-store.js";

export interface SessionPlaneParts extends PlaneParts {
  decisionLog: ((line: string) => void) | null;
  /** Tenants with their pin caps (auth:), null when none are configured. */
  tenants: ReadonlyMap<string, TenantConfig> | null;
  /** The process each worker runs now (the worker plane's Inspect), null while unknown. */
  incarnation: (worker: string) => string | null;
}

export class SessionPlane {
  readonly store: SessionStore;
  readonly path: CommandPath;
  readonly expiry: SessionExpiry;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  readonly recording = new Map<string, Promise<void>>();
  /** Reports sessions idle past sessions.idleAfterSeconds to the policy (the idle timer calls it). */
  readonly sweepIdle: () => Promise<void>;
  private readonly idle: Periodic;

  constructor(private readonly p: SessionPlaneParts) {
    const { config, nats, clock, log } = p;
    this.store = p.store;
    this.path = new CommandPath({
      sessions: p.store,
      kv: () => nats.kv(),
      publisher: () => (nats.connected ? nats.publisher : null),
      clock,
      metrics: p.metrics,
      holdMetrics: p.holdMetrics,
      log,
      decisionLog: p.decisionLog,
      observe: p.observe,
      incarnation: p.incarnation,
      tenants: p.tenants,
      maxQueued: config.limits.commandQueue,
      maxCommands: config.sessions.maxCommands,
      heartbeatMs: config.sessions.heartbeatMs,
      pending: this.recording,
      sessionTtlSeconds: config.sessions.ttlSeconds,
    });
    this.expiry = new SessionExpiry({
      kv: () => nats.kv(),
      ledger: this.path.ledger,
      observe: p.observe,
      now: () => clock.now(),
      log,
      ttlSeconds: config.sessions.ttlSeconds,
    });
    nats.whenUp(() => this.path.sink.flush());
    nats.whenUp(followOnce(nats, this.path.blockUse, log));
    const idleAfterSeconds = config.sessions.idleAfterSeconds;
    this.sweepIdle = idleSweeper(p.store, () => clock.now(), idleAfterSeconds, p.observe);
    this.idle = new Periodic(
      () => this.sweepIdle(),
      idleAfterSeconds > 0 ? Math.max(1000, (idleAfterSeconds * 1000) / 2) : 0,
      (e) => log.warn(`gateway: idle sweep: ${e.message}`),
    );
  }

  /** Starts the heartbeat and the expiry sweeps (with NATS: both live in the session bucket). */
  start(): void {
    if (!this.p.nats.configured) return;
    this.path.ledger.start();
    this.expiry.start();
  }

  /** Starts the idle sweeps (once the gateway serves). */
  startIdleSweeps(): void {
    this.idle.start();
  }

  /** Its close on the server's: the idle sweeps stop first, the rest once the server has closed. */
  closeWith(app: FastifyInstance): void {
    app.addHook("preClose", async () => this.idle.cancel());
    app.addHook("onClose", async () => {
      await Promise.all([...this.recording.values()]).catch(() => undefined);
      await this.path.sink.settled().catch(() => undefined);
      await this.expiry.stop().catch(() => undefined);
      await this.path.ledger.stop().catch(() => undefined);
    });
  }

  /** Resolves once recorded turns, sent commands, their records and the ledger's chains are done. */
  async settled(): Promise<void> {
    const { sink, recorder, ledger } = this.path;
    do {
      await Promise.all([...this.recording.values()]);
      await sink.settled();
      await Promise.all([...recorder.pending]);
      await ledger.settled();
      // A turn that finished meanwhile may have sent commands after the wait above began.
    } while (
      this.recording.size > 0 ||
      recorder.pending.size > 0 ||
      sink.inFlight > 0 ||
      ledger.busy
    );
  }
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
