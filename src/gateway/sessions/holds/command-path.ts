// The way a policy's commands go out and their outcomes come back, built in the order each part
// needs the one before: the sink (sends over NATS, queues while it is down), the hold ledger
// (names each hold in its session's record before the sink sends it), the tenants' pin caps
// (trim or drop a pin before the ledger sees it), and the recorder (each outcome: a decision-log
// line, the record, the hold it settles, and a CommandAcked observation back to the policy).
import type { KV } from "@nats-io/kv";
import type { Observation } from "../../../contract/observations.js";
import type { PolicyCommand } from "../../../contract/policy.js";
import type { ControlPublisher } from "../../../control/publisher.js";
import { uuidv7 } from "../../../protocol/index.js";
import { BlockUse, SESSIONLESS_WINDOW_MS } from "../../auth/block-use.js";
import type { TenantConfig } from "../../auth/config.js";
import { EvictGuard } from "../../auth/evict-guard.js";
import { PinCaps } from "../../auth/pin-caps.js";
import { CommandRecorder } from "../command-record.js";
import { type CommandOutcome, CommandSink } from "../command-sink.js";
import type { GatewayLog } from "../../core/logger.js";
import type { GatewayMetrics } from "../../telemetry/metrics.js";
import type { Clock } from "../../core/clock.js";
import type { SessionStore } from "../session-store.js";
import { HoldLedger } from "./ledger.js";
import type { HoldMetrics } from "./metrics.js";

export interface CommandPathOptions {
  sessions: SessionStore;
  /** The session bucket while NATS is up, else null. */
  kv: () => KV | null;
  /** The control publisher while NATS is up, else null. */
  publisher: () => ControlPublisher | null;
  clock: Clock;
  metrics: GatewayMetrics;
  holdMetrics: HoldMetrics;
  log: GatewayLog;
  decisionLog: ((line: string) => void) | null;
  /** Where each outcome goes back as an observation (the policy's observer). */
  observe: (o: Observation) => void;
  /** The process each worker runs now (from its Inspect), null while unknown. */
  incarnation: (worker: string) => string | null;
  /** Tenants with their pin caps (auth:), null when none are configured. */
  tenants: ReadonlyMap<string, TenantConfig> | null;
  maxQueued: number;
  maxCommands: number;
  heartbeatMs: number;
  /** Work a session's next turn waits for (the gateway's map of turns being recorded). */
  pending: Map<string, Promise<void>>;
  /** How long a session record lives after its last write (sessions.ttlSeconds; 0: forever). */
  sessionTtlSeconds: number;
}

export class CommandPath {
  readonly sink: CommandSink;
  readonly ledger: HoldLedger;
  readonly caps: PinCaps | null;
  readonly recorder: CommandRecorder;
  /** Who uses which blocks (fed by `observed` and by every replica's records: followSessions). */
  readonly blockUse: BlockUse;
  private readonly guard: EvictGuard;

  constructor(o: CommandPathOptions) {
    // Outcomes reach the recorder through `outcome`, which runs only once a command has been sent.
    this.sink = new CommandSink({
      publisher: o.publisher,
      maxQueued: o.maxQueued,
      metrics: o.metrics,
      onOutcome: (pc, out) => this.outcome(pc, out),
      log: o.log,
    });
    this.ledger = new HoldLedger({
      sessions: o.sessions,
      kv: o.kv,
      // Again as it goes out: the releases the ledger makes itself (a close's RevokeLease).
      send: (pc) => this.guarded(pc, (g) => this.sink.submit(g)),
      unsent: (pc, why) => this.outcome(pc, { state: "dropped", id: null, error: why }),
      clock: o.clock,
      metrics: o.holdMetrics,
      log: o.log,
      heartbeatMs: o.heartbeatMs,
      pending: o.pending,
      incarnation: o.incarnation,
    });
    this.blockUse = new BlockUse({
      clock: o.clock,
      sessionTtlMs: o.sessionTtlSeconds * 1000,
      registry: o.metrics.registry,
    });
    this.guard = new EvictGuard(this.blockUse, () => o.sessions.localRecords(), o.metrics.registry);
    this.caps = o.tenants
      ? new PinCaps(o.tenants, () => o.sessions.localRecords(), o.metrics.registry)
      : null;
    this.recorder = new CommandRecorder({
      sessions: o.sessions,
      clock: o.clock,
      maxCommands: o.maxCommands,
      observe: o.observe,
      decisionLog: o.decisionLog,
      log: o.log,
      settle: (rec, pc, worker, res) => this.ledger.settleInto(rec, pc, worker, res),
      recordOf: (pc) => this.ledger.recordOf(pc),
    });
  }

  /**
   * One batch of the policy's commands: each named (one without an id gets one here), held to
   * the tenants' caps (a dropped one reported as such), then recorded and sent by the ledger.
   */
  submit(batch: readonly PolicyCommand[]): void {
    const named = batch.map((pc) => (pc.id === undefined ? { ...pc, id: uuidv7() } : pc));
    const capped = this.caps ? this.caps.limit(named) : { sent: named, dropped: [] };
    for (const d of capped.dropped)
      this.outcome(d.pc, { state: "dropped", id: null, error: d.why });
    for (const pc of capped.sent) this.guarded(pc, (g) => this.ledger.submit(g));
  }

  /** The blocks a finished request stood on, before the policy decides on it. */
  observed(o: Observation): void {
    if (o.type !== "TurnFinished" || o.status !== 200 || !o.chain.length) return;
    const tenant = o.tenant ?? null;
    if (o.sessionId) return this.blockUse.session(o.sessionId, tenant, o.worker, o.chain, o.at);
    const ttl = Math.max(0, ...(o.cacheMarkers?.breakpoints ?? []).map((b) => b.ttlSeconds));
    const window = Math.max(SESSIONLESS_WINDOW_MS, ttl * 1000);
    this.blockUse.sessionless(tenant, o.worker, o.chain, o.at, window);
  }

  /** Sends the command as the eviction guard lets it go, or reports it dropped. */
  private guarded(pc: PolicyCommand, send: (pc: PolicyCommand) => void): void {
    const g = this.guard.check(pc);
    if ("dropped" in g) this.outcome(pc, { state: "dropped", id: null, error: g.dropped });
    else send(g.pc);
  }

  private outcome(pc: PolicyCommand, out: CommandOutcome): void {
    this.recorder.record(pc, out);
  }
}
