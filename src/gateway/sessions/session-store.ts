// Session records in a NATS JetStream KV bucket, so every gateway replica sees the same sessions;
// a local copy of each record this replica touched keeps requests served while NATS is down (the
// record is then this replica's view until NATS is back). Updates are compare-and-set on the
// entry's revision, retried on conflict, so two replicas finishing turns of one session at once
// do not lose either update.
import { createHash } from "node:crypto";
import type { KV, KvEntry } from "@nats-io/kv";
import type { BlockUse } from "../auth/block-use.js";
import type { SessionStoreCounts } from "../telemetry/metric-parts.js";
import { isSessionRecord, newSessionRecord, type SessionRecord } from "./holds/record.js";
import { type GatewayLog, lineLog } from "../core/logger.js";
import { type Clock, systemClock } from "../core/clock.js";

interface Local {
  record: SessionRecord;
  revision: number;
}

/** A KV key for any session id: base64url keeps the key alphabet; long ids are hashed. */
export function sessionKey(id: string): string {
  const b = Buffer.from(id, "utf8");
  return b.length <= 192
    ? `s.${b.toString("base64url")}`
    : `h.${createHash("sha256").update(b).digest("hex")}`;
}

/** A session bucket entry's record; null for a delete or a value that is no record it reads. */
export function recordOf(e: KvEntry): SessionRecord | null {
  if (e.operation !== "PUT" || e.length === 0) return null;
  let r: unknown;
  try {
    r = e.json<unknown>();
  } catch {
    return null;
  }
  return isSessionRecord(r) ? r : null;
}

/**
 * Follows the shared session bucket (every replica's writes, this one's included) into `use`, so
 * the sessions of other replicas count too. Ends when the connection does; started again on each
 * reconnect.
 */
export async function followSessions(kv: KV, use: BlockUse): Promise<void> {
  const ids = new Map<string, string>();
  const it = await kv.watch({ key: ">" });
  for await (const e of it) {
    if (e.operation !== "PUT" || e.length === 0) {
      const id = ids.get(e.key);
      if (id !== undefined) use.forget(id);
      ids.delete(e.key);
      continue;
    }
    const r = recordOf(e);
    if (!r?.worker) continue;
    ids.set(e.key, r.id);
    use.session(r.id, r.tenant ?? null, r.worker, r.chain, r.lastActivityMs);
  }
}

export interface SessionStoreOptions {
  /** The bucket while NATS is up; null while it is down (KV calls are skipped then), or not configured. */
  kv: () => KV | null;
  /** Whether NATS is configured at all (records are shared) or this replica keeps them alone. */
  configured: boolean;
  opTimeoutMs: number;
  metrics: SessionStoreCounts;
  clock?: Clock;
  /** Records kept locally (least recently used dropped first). */
  maxLocal?: number;
  log?: GatewayLog;
}

class OpTimeout extends Error {}

export class SessionStore {
  private readonly local = new Map<string, Local>();
  private readonly foreignSeen = new Set<string>();
  /** Each session's write under way from this replica (the next one waits for it). */
  private readonly writing = new Map<string, Promise<void>>();
  private readonly clock: Clock;
  private readonly maxLocal: number;
  private readonly log: GatewayLog;

  constructor(private readonly o: SessionStoreOptions) {
    this.clock = o.clock ?? systemClock;
    this.maxLocal = o.maxLocal ?? 100_000;
    this.log = o.log ?? lineLog((l) => console.error(l));
  }

  get shared(): boolean {
    return this.o.configured;
  }

  /** The record as the bucket holds it now (or the local copy when NATS is unavailable). */
  async get(id: string): Promise<SessionRecord | null> {
    const kv = this.kvIfUp("get");
    if (kv) {
      try {
        const e = await this.timed(kv.get(sessionKey(id)));
        if (e && e.operation === "PUT" && e.length > 0) {
          const r = e.json<unknown>();
          if (isSessionRecord(r) && r.id === id) {
            this.remember(id, r, e.revision);
            return r;
          }
          if (this.foreign(id, r)) return this.local.get(id)?.record ?? null;
          this.o.metrics.sessionStoreErrors.inc({ op: "decode" });
          this.log.warn(
            `gateway: session ${JSON.stringify(id)}: the stored record is not a session record (ignored)`,
          );
          return null;
        }
        if (!e) return this.local.get(id)?.record ?? null;
        return null;
      } catch (err) {
        this.fail("get", id, err);
      }
    }
    return this.local.get(id)?.record ?? null;
  }

  /**
   * Applies `change` to the current record (created when absent) and writes it back (after this
   * replica's writes of the session already under way). `strict`: a
   * write the bucket refused (conflicts kept losing, a timeout) throws instead of landing in this
   * replica's copy only (a hold must be named where every replica reads it before it is taken).
   */
  update(id: string, change: (r: SessionRecord) => void, strict = false): Promise<SessionRecord> {
    return this.inTurn(id, () => this.updateNow(id, change, strict));
  }

  private async updateNow(
    id: string,
    change: (r: SessionRecord) => void,
    strict: boolean,
  ): Promise<SessionRecord> {
    const kv = this.kvIfUp("put");
    if (kv) {
      const key = sessionKey(id);
      try {
        let attempt = 0;
        for (; attempt < 8; attempt++) {
          const e = await this.timed(kv.get(key));
          const cur = e && e.operation === "PUT" && e.length > 0 ? e.json<unknown>() : null;
          // Another gateway version's record is left as it is (its holds stay named there): this
          // replica serves the session from its own copy, but takes no hold only that copy would name.
          if (this.foreign(id, cur)) {
            if (strict) throw new Error("the stored record is another gateway version's");
            break;
          }
          const rec =
            isSessionRecord(cur) && cur.id === id
              ? cur
              : (this.local.get(id)?.record ?? newSessionRecord(id, this.clock.now()));
          const next = structuredClone(rec);
          change(next);
          try {
            const rev = e
              ? await this.timed(kv.update(key, JSON.stringify(next), e.revision))
              : await this.timed(kv.create(key, JSON.stringify(next)));
            this.remember(id, next, rev);
            return next;
          } catch (err) {
            if (
              err instanceof OpTimeout ||
              !/wrong last sequence|key exists/i.test((err as Error).message)
            )
              throw err;
            // Another replica wrote in between: read again and reapply (after a short random pause,
            // so replicas racing on one session do not keep colliding).
            await new Promise((res) => setTimeout(res, Math.random() * 5 * (attempt + 1)));
          }
        }
        if (attempt === 8)
          throw new Error("8 conflicting writes in a row (other replicas kept writing the record)");
      } catch (err) {
        // strict: the caller says what it did instead (logged there, once), not "this replica's copy".
        if (strict) {
          this.o.metrics.sessionStoreErrors.inc({ op: "put" });
          throw err;
        }
        this.fail("put", id, err);
      }
    }
    const cur = this.local.get(id);
    const next = cur ? structuredClone(cur.record) : newSessionRecord(id, this.clock.now());
    change(next);
    this.remember(id, next, cur?.revision ?? 0);
    return next;
  }

  /**
   * Applies `change` to the record only if the bucket still holds it at `revision` (one
   * compare-and-set, no retry): null when another write came first (or the bucket is down), so
   * of several replicas acting on what they read at one revision, exactly one goes ahead.
   */
  updateAt(
    id: string,
    revision: number,
    change: (r: SessionRecord) => void,
  ): Promise<SessionRecord | null> {
    return this.inTurn(id, () => this.updateAtNow(id, revision, change));
  }

  /**
   * Runs one session's writes from this replica one at a time, in call order, so they never
   * conflict with each other: a compare-and-set can only lose to another replica's write.
   */
  private inTurn<T>(id: string, write: () => Promise<T>): Promise<T> {
    const next = (this.writing.get(id) ?? Promise.resolve()).then(write, write);
    const done = next.then(
      () => undefined,
      () => undefined,
    );
    this.writing.set(id, done);
    void done.then(() => {
      if (this.writing.get(id) === done) this.writing.delete(id);
    });
    return next;
  }

  private async updateAtNow(
    id: string,
    revision: number,
    change: (r: SessionRecord) => void,
  ): Promise<SessionRecord | null> {
    const kv = this.kvIfUp("put");
    if (!kv) return null;
    const key = sessionKey(id);
    try {
      const e = await this.timed(kv.get(key));
      if (!e || e.revision !== revision || e.operation !== "PUT" || e.length === 0) return null;
      const cur = e.json<unknown>();
      if (!isSessionRecord(cur) || cur.id !== id) return null;
      const next = structuredClone(cur);
      change(next);
      const rev = await this.timed(kv.update(key, JSON.stringify(next), revision));
      this.remember(id, next, rev);
      return next;
    } catch (err) {
      if (!(err instanceof OpTimeout) && /wrong last sequence/i.test((err as Error).message))
        return null;
      this.fail("put", id, err);
      return null;
    }
  }

  /** Records this replica touched recently (for the idle sweep); the KV bucket is not listed. */
  localRecords(): IterableIterator<SessionRecord> {
    return [...this.local.values()].map((l) => l.record)[Symbol.iterator]();
  }

  /** A record of this session another gateway version wrote: counted and logged once per session. */
  private foreign(id: string, v: unknown): boolean {
    const r = v as { v?: unknown; id?: unknown } | null;
    if (typeof r !== "object" || r === null || r.id !== id || r.v === 1) return false;
    if (!this.foreignSeen.has(id)) {
      if (this.foreignSeen.size > 10_000) this.foreignSeen.clear();
      this.foreignSeen.add(id);
      this.o.metrics.sessionStoreErrors.inc({ op: "version" });
      this.log.warn(
        `gateway: session ${JSON.stringify(id)}: the stored record has version ${JSON.stringify(r.v)}, this gateway writes 1; it is left as it is and the session is served from this replica's copy`,
      );
    }
    return true;
  }

  private kvIfUp(op: string): KV | null {
    if (!this.o.configured) return null;
    const kv = this.o.kv();
    if (!kv) this.o.metrics.sessionStoreErrors.inc({ op: `${op}_skipped_nats_down` });
    return kv;
  }

  private remember(id: string, record: SessionRecord, revision: number): void {
    this.local.delete(id);
    this.local.set(id, { record, revision });
    if (this.local.size > this.maxLocal) {
      const oldest = this.local.keys().next().value as string;
      this.local.delete(oldest);
    }
  }

  private fail(op: string, id: string, err: unknown): void {
    this.o.metrics.sessionStoreErrors.inc({ op });
    this.log.warn(
      `gateway: session ${JSON.stringify(id)}: KV ${op} failed (${(err as Error).message}); using this replica's copy`,
    );
  }

  private timed<T>(p: Promise<T>): Promise<T> {
    let t: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      t = setTimeout(
        () => reject(new OpTimeout(`timed out after ${this.o.opTimeoutMs} ms`)),
        this.o.opTimeoutMs,
      );
    });
    return Promise.race([p, timeout]).finally(() => clearTimeout(t));
  }
}
