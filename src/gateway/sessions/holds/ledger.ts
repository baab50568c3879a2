// The gate every hold-changing command passes: before it is sent the session's current record is
// read (compare-and-set) and the hold it takes, or the part of named holds it releases, is written
// there; its ack settles exactly those holds. Close, on any replica, releases every hold the record
// names. Each replica advertises, under a heartbeat in the same bucket, the sessions where it holds
// in-flight pins; when a heartbeat stops, another replica releases those holds and says so in the
// record. Commands of one session keep their order (one chain per session). Each write's plan
// (plan.ts) is applied once it is stored: its events counted and logged, then its commands sent.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { KV } from "@nats-io/kv";
import type { HoldEffect, HoldEnv, HoldRecord, HoldResult } from "./holds.js";
import {
  type HoldEvent,
  type HoldPlan,
  type HoldSend,
  planHold,
  planRelease,
  planSettle,
} from "./plan.js";
import { Periodic } from "../../core/periodic.js";
import type { HoldMetrics } from "./metrics.js";
import type { PolicyCommand } from "../../../contract/policy.js";
import { uuidv7 } from "../../../protocol/index.js";
import type { ReleaseRecord, SessionRecord } from "./record.js";
import { MAX_SESSION_ID_BYTES } from "../../request/session-id.js";
import type { Clock } from "../../core/clock.js";
import type { SessionStore } from "../session-store.js";
import type { GatewayLog } from "../../core/logger.js";

export interface HoldLedgerOptions {
  sessions: SessionStore;
  kv: () => KV | null;
  /** Where commands go once recorded (the command sink). */
  send: (pc: PolicyCommand) => void;
  /** A command not sent because its hold could not be recorded where every replica reads it. */
  unsent: (pc: PolicyCommand, why: string) => void;
  clock: Clock;
  metrics: HoldMetrics;
  log: GatewayLog;
  heartbeatMs: number;
  /** Work a session's next turn waits for (the gateway's map of turns being recorded): a chain joins it. */
  pending?: Map<string, Promise<void>>;
  /** The process each worker runs now (from its Inspect), null while unknown. */
  incarnation: (worker: string) => string | null;
}

interface Heartbeat {
  v: 1;
  replica: string;
  atMs: number;
  sessions: string[];
}

const HEARTBEAT_PREFIX = "r.";

/** Effects of commands whose outcome has not come, at most (an outcome normally comes within a command's timeout). */
const MAX_UNSETTLED = 1 << 16;

export class HoldLedger {
  readonly replica = `${hostname()
    .replace(/[^A-Za-z0-9_-]/g, "_")
    .slice(0, 32)}-${process.pid}-${randomBytes(3).toString("hex")}`;
  private readonly chains = new Map<string, Promise<void>>();
  /** What each command sent and not settled yet takes or releases, by its id (PolicyCommand.id). */
  private readonly effects = new Map<string, HoldEffect>();
  /** Sessions where this replica holds in-flight pins or has a release unacked (advertised in its heartbeat). */
  private readonly owned = new Set<string>();
  private advertised = new Set<string>();
  private seq = 0;
  /** The heartbeat and the reaper (one task: each run beats, then looks for silent replicas). */
  private readonly beats: Periodic;
  private readonly logged = new Set<string>();
  /** Whether this replica wrote a heartbeat (stop withdraws it). */
  private beaten = false;

  constructor(private readonly o: HoldLedgerOptions) {
    this.beats = new Periodic(
      () => this.tick(),
      o.heartbeatMs,
      (e) => this.o.log.warn(`gateway: replica heartbeat: ${e.message}`),
    );
  }

  private env(): HoldEnv {
    return {
      replica: this.replica,
      now: this.o.clock.now(),
      nextId: () => `${this.replica}.${(++this.seq).toString(36)}`,
      incarnation: this.o.incarnation,
    };
  }

  /**
   * The record of this replica's sessionless in-flight holds: longer than any session id a request
   * may name (so no client's session shares it), advertised in the heartbeat like a session's.
   */
  readonly sessionlessId =
    `${this.replica}: in-flight holds of sessionless requests ${"~".repeat(MAX_SESSION_ID_BYTES)}`;

  /** The record a command's hold is named in: its session's, or this replica's sessionless record. */
  recordOf(pc: PolicyCommand): string | null {
    if (pc.sessionId) return pc.sessionId;
    return pc.hold === "inflight" && pc.command.type === "Cache" && pc.worker !== "broadcast"
      ? this.sessionlessId
      : null;
  }

  /** Records what `pc` takes or releases in its session (a sessionless in-flight hold: in this replica's record), then sends it. */
  submit(command: PolicyCommand): void {
    // Its outcome settles its hold by its id: a command that comes without one is named here.
    const pc = command.id === undefined ? { ...command, id: uuidv7() } : command;
    const sid = this.recordOf(pc);
    if (!sid || pc.worker === "broadcast") {
      this.o.send(pc);
      return;
    }
    this.run(sid, async () => {
      let plan: HoldPlan | null = null;
      let rec: SessionRecord;
      try {
        rec = await this.o.sessions.update(
          sid,
          (r) => {
            plan = planHold(r, pc, this.env());
          },
          true,
        );
      } catch (e) {
        this.o.metrics.badRecords.inc({ why: "update_lost" });
        const why = `its hold could not be recorded in the session store (${(e as Error).message}); not sent`;
        this.once(
          `lost|${sid}`,
          `gateway: session ${JSON.stringify(sid)}: ${pc.command.type} to ${pc.worker}: ${why} (logged once a session; kvctl_gateway_bad_records_total counts each)`,
        );
        this.o.unsent(pc, why);
        return;
      }
      await this.landed(rec, plan as HoldPlan | null);
    });
  }

  /**
   * Applies a command's outcome to the holds it took or released, inside the record's update
   * (run again on every write conflict); returns what to do once that write is stored (count, log,
   * forget the settled effect), or null when the command took or released no hold here.
   */
  settleInto(
    rec: SessionRecord,
    pc: PolicyCommand,
    worker: string,
    res: HoldResult,
  ): ((stored: SessionRecord) => void) | null {
    const id = pc.id;
    const effect = id === undefined ? undefined : this.effects.get(id);
    if (id === undefined || !effect || worker !== pc.worker) return null;
    const plan = planSettle(rec, pc, effect, worker, res, this.env());
    return (stored) => {
      if (this.effects.get(id) === effect) this.effects.delete(id);
      this.apply(plan.effects);
      if (!this.owns(stored)) this.owned.delete(stored.id);
    };
  }

  /** Releases every hold the session's record names, whoever took them. */
  close(sid: string, reason = "session closed"): Promise<void> {
    return this.run(sid, async () => {
      // A release another replica sent and that is still unacked is sent again if that replica is gone.
      const live = await this.liveReplicas();
      await this.releaseNow(
        sid,
        () => true,
        reason,
        null,
        (e) => e.doubt || !live.has(e.by),
      );
    });
  }

  /**
   * A session whose record is about to leave the bucket (its TTL): releases every hold it names,
   * as close does, in one compare-and-set on the revision the caller read. Of the replicas that
   * read that revision exactly one wins; the others (and this one, when the session was used
   * meanwhile) do nothing. Resolves whether this replica released them.
   */
  expire(sid: string, revision: number, idleMs: number): Promise<boolean> {
    let won = false;
    return this.run(sid, async () => {
      const live = await this.liveReplicas();
      const note = {
        state: "expired",
        reason: `session expired (no write for ${idleMs} ms, the bucket drops it soon): every hold released by ${this.replica}`,
        always: true,
      };
      let plan: HoldPlan | null = null;
      const rec = await this.o.sessions.updateAt(sid, revision, (rec) => {
        plan = planRelease(
          rec,
          this.env(),
          () => true,
          "session expired",
          (e) => e.doubt || !live.has(e.by),
          note,
        );
      });
      if (!rec) return;
      won = true;
      this.o.metrics.expired.inc();
      await this.landed(rec, plan as HoldPlan | null);
    }).then(() => won);
  }

  /** Whether this replica has an in-flight hold or an unacked release in the record. */
  private owns(rec: SessionRecord): boolean {
    return (rec.holds ?? []).some(
      (h) =>
        (h.replica === this.replica && h.kind === "inflight") ||
        (h.releasing.length > 0 && h.releasingBy === this.replica),
    );
  }

  /** Advertises the session in the heartbeat before its command goes out (another replica reaps it if this one dies). */
  private async track(rec: SessionRecord): Promise<void> {
    if (!this.owns(rec)) {
      this.owned.delete(rec.id);
      return;
    }
    this.owned.add(rec.id);
    if (!this.advertised.has(rec.id))
      await this.beat().catch((e) =>
        this.o.log.warn(`gateway: replica heartbeat: ${(e as Error).message}`),
      );
  }

  /** Whether a session chain is still running. */
  get busy(): boolean {
    return this.chains.size > 0;
  }

  /** Resolves when every session chain started so far has run. */
  async settled(): Promise<void> {
    while (this.chains.size > 0) await Promise.all([...this.chains.values()]);
  }

  private async releaseNow(
    sid: string,
    pick: (h: HoldRecord) => boolean,
    reason: string,
    note: string | null,
    resend: (e: ReleaseRecord) => boolean,
  ): Promise<void> {
    let plan: HoldPlan | null = null;
    const rec = await this.o.sessions.update(
      sid,
      (rec) => {
        plan = planRelease(
          rec,
          this.env(),
          pick,
          reason,
          resend,
          note === null ? null : { state: "reaped", reason: note, always: false },
        );
      },
      true,
    );
    await this.landed(rec, plan as HoldPlan | null);
  }

  /**
   * Once a write is stored: its events counted and logged, the session advertised in the
   * heartbeat when this replica now holds something there, then its commands sent (in that order:
   * another replica reaps what a dead one advertised, so it is advertised before it is taken).
   */
  private async landed(rec: SessionRecord, plan: HoldPlan | null): Promise<void> {
    this.apply(plan?.effects ?? []);
    await this.track(rec);
    for (const x of plan?.sends ?? []) {
      this.remember(x);
      this.o.send(x.pc);
    }
  }

  /** Counts and logs what a stored write did, once. */
  private apply(events: readonly HoldEvent[]): void {
    const m = this.o.metrics;
    for (const e of events) {
      if (e.type === "dropped") m.dropped.inc({ kind: e.kind, why: e.why });
      else if (e.type === "skipped") m.releasesSkipped.inc({ type: e.command });
      else if (e.type === "adopted") {
        m.badRecords.inc({ why: "older_version" });
        this.once(
          `legacy|${e.session}`,
          `gateway: session ${JSON.stringify(e.session)}: record from an older gateway; its pins and leases are adopted as holds`,
        );
      } else {
        m.unsure.inc({ type: e.command, status: e.status });
        if (e.status !== "partial" || e.release)
          this.once(
            `${e.session}|${e.command}|${e.status}`,
            `gateway: session ${JSON.stringify(e.session)}: ${e.command} to ${e.worker} came back ${e.status}; its hold is kept in doubt until close or expiry`,
          );
      }
    }
  }

  /** The effect the command's outcome settles, until its outcome comes (at most MAX_UNSETTLED kept). */
  private remember({ pc, effect }: HoldSend): void {
    if (!effect || pc.id === undefined) return;
    this.effects.set(pc.id, effect);
    if (this.effects.size > MAX_UNSETTLED)
      this.effects.delete(this.effects.keys().next().value as string);
  }

  /** Replicas whose heartbeat is fresh (this one included). */
  private async liveReplicas(): Promise<Set<string>> {
    const live = new Set([this.replica]);
    for (const hb of await this.heartbeats())
      if (this.o.clock.now() - hb.atMs < 3 * this.o.heartbeatMs) live.add(hb.replica);
    return live;
  }

  private async heartbeats(): Promise<(Heartbeat & { key: string; revision: number })[]> {
    const kv = this.o.kv();
    if (!kv) return [];
    const keys: string[] = [];
    for await (const k of await kv.keys(`${HEARTBEAT_PREFIX}>`)) keys.push(k);
    const out: (Heartbeat & { key: string; revision: number })[] = [];
    for (const key of keys) {
      const e = await kv.get(key);
      if (e?.operation !== "PUT" || e.length === 0) continue;
      let hb: Heartbeat;
      try {
        hb = e.json<Heartbeat>();
      } catch {
        hb = { v: 1, replica: key.slice(HEARTBEAT_PREFIX.length), atMs: 0, sessions: [] };
      }
      out.push({ ...hb, key, revision: e.revision });
    }
    return out;
  }

  /** Starts the heartbeat and the reaper. */
  start(): void {
    this.beats.start();
  }

  /**
   * Stops the heartbeat, waits for the session chains, and withdraws the heartbeat when this
   * replica holds nothing in flight any more; else the heartbeat stays, goes silent, and another
   * replica reaps what it names.
   */
  async stop(): Promise<void> {
    await this.beats.stop();
    await this.settled();
    const kv = this.o.kv();
    if (!kv || this.owned.size > 0 || !this.beaten) return;
    await kv
      .delete(`${HEARTBEAT_PREFIX}${this.replica}`)
      .catch((e) => this.o.log.warn(`gateway: replica heartbeat: ${(e as Error).message}`));
  }

  async tick(): Promise<void> {
    await this.beat();
    await this.reap();
  }

  /** Writes this replica's heartbeat with the sessions where it holds in-flight pins. */
  async beat(): Promise<void> {
    const kv = this.o.kv();
    if (!kv) return;
    const sessions = new Set(this.owned);
    const hb: Heartbeat = {
      v: 1,
      replica: this.replica,
      atMs: this.o.clock.now(),
      sessions: [...sessions],
    };
    await kv.put(`${HEARTBEAT_PREFIX}${this.replica}`, JSON.stringify(hb));
    this.beaten = true;
    this.advertised = sessions;
  }

  /** Replicas silent for 3 heartbeats: their in-flight holds are released and their entry removed. */
  async reap(): Promise<void> {
    const kv = this.o.kv();
    if (!kv) return;
    for (const hb of await this.heartbeats()) {
      if (hb.replica === this.replica || this.o.clock.now() - hb.atMs < 3 * this.o.heartbeatMs)
        continue;
      const sessions = Array.isArray(hb.sessions)
        ? hb.sessions.filter((x) => typeof x === "string")
        : [];
      const note = `replica ${hb.replica} gone (no heartbeat for ${this.o.clock.now() - hb.atMs} ms): its in-flight holds and unacked releases taken over by ${this.replica}`;
      const mine = (h: HoldRecord) =>
        (h.replica === hb.replica && h.kind === "inflight") || h.releasingBy === hb.replica;
      await Promise.all(
        sessions.map((sid) =>
          this.run(sid, () =>
            this.releaseNow(
              sid,
              mine,
              "replica gone: release its in-flight hold",
              note,
              (e) => e.by === hb.replica,
            ),
          ),
        ),
      );
      this.o.metrics.replicasReaped.inc();
      this.o.log.warn(`gateway: ${note} (${sessions.length} session(s))`);
      await kv.delete(hb.key, { previousSeq: hb.revision }).catch(() => undefined);
    }
  }

  private once(key: string, line: string): void {
    if (this.logged.has(key)) return;
    if (this.logged.size > 10_000) this.logged.clear();
    this.logged.add(key);
    this.o.log.warn(line);
  }

  private run(sid: string, fn: () => Promise<void>): Promise<void> {
    const prev = this.chains.get(sid) ?? Promise.resolve();
    const next = prev
      .then(fn)
      .catch((e) =>
        this.o.log.warn(
          `gateway: holds of session ${JSON.stringify(sid)}: ${(e as Error).message}`,
        ),
      );
    this.chains.set(sid, next);
    const pending = this.o.pending;
    const joined = pending ? Promise.all([pending.get(sid), next]).then(() => undefined) : next;
    pending?.set(sid, joined);
    void next.finally(() => {
      if (this.chains.get(sid) === next) this.chains.delete(sid);
      if (pending?.get(sid) === joined) pending.delete(sid);
    });
    return next;
  }
}
