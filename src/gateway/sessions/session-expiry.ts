// Session expiry: the bucket drops a record sessions.ttlSeconds after its last write, and the holds
// it names would then outlive it (until their own TTLs). Each replica looks over the bucket now and
// then; a record whose last write is close to that age and that still names holds has them released
// as close does, by whichever replica wins the compare-and-set on the revision it read (the ledger's
// expire), and that replica's policy hears the session closed. The release write renews the record,
// which then leaves the bucket with nothing held.
import type { KV } from "@nats-io/kv";
import type { Observation } from "../../contract/observations.js";
import { Periodic } from "../core/periodic.js";
import type { HoldLedger } from "./holds/ledger.js";
import { namesHolds } from "./holds/holds.js";
import { recordOf } from "./session-store.js";
import type { GatewayLog } from "../core/logger.js";

export interface SessionExpiryOptions {
  kv: () => KV | null;
  ledger: HoldLedger;
  observe: (o: Observation) => void;
  /** The gateway's clock (ms). */
  now: () => number;
  log: GatewayLog;
  ttlSeconds: number;
}

/** How often the bucket is looked over, and how long before the bucket's TTL a record is expired. */
export function expiryTiming(ttlSeconds: number): { intervalMs: number; expireAfterMs: number } {
  const ttlMs = ttlSeconds * 1000;
  const intervalMs = Math.min(60_000, Math.max(500, Math.floor(ttlMs / 10)));
  return { intervalMs, expireAfterMs: ttlMs - Math.min(Math.floor(ttlMs * 0.3), 5 * intervalMs) };
}

const SESSION_KEYS = ["s.>", "h.>"];

export class SessionExpiry {
  private readonly timing: { intervalMs: number; expireAfterMs: number };
  private readonly sweeps: Periodic;

  constructor(private readonly o: SessionExpiryOptions) {
    this.timing = expiryTiming(o.ttlSeconds);
    this.sweeps = new Periodic(
      () => this.sweepOnce(),
      o.ttlSeconds > 0 ? this.timing.intervalMs : 0,
      (e) => this.o.log.warn(`gateway: session expiry: ${e.message}`),
    );
  }

  start(): void {
    this.sweeps.start();
  }

  stop(): Promise<void> {
    return this.sweeps.stop();
  }

  /** One look over the bucket (a sweep still running is joined, not doubled). */
  sweep(): Promise<void> {
    return this.sweeps.run();
  }

  private async sweepOnce(): Promise<void> {
    const kv = this.o.kv();
    if (!kv || this.o.ttlSeconds <= 0) return;
    const keys: string[] = [];
    for (const filter of SESSION_KEYS) for await (const k of await kv.keys(filter)) keys.push(k);
    for (const key of keys) {
      const e = await kv.get(key);
      if (e?.operation !== "PUT" || e.length === 0) continue;
      const age = this.o.now() - e.created.getTime();
      if (age < this.timing.expireAfterMs) continue;
      // Not a record this gateway reads: the store counts those when a request meets them.
      const rec = recordOf(e);
      if (!rec || !namesHolds(rec)) continue;
      if (!(await this.o.ledger.expire(rec.id, e.revision, age))) continue;
      this.o.log.info(
        `gateway: session ${JSON.stringify(rec.id)} expired (no write for ${age} ms): its holds are released`,
      );
      this.o.observe({
        type: "SessionHint",
        at: this.o.now(),
        sessionId: rec.id,
        event: "close",
        toolName: null,
        toolCallId: null,
        keepTokens: null,
      });
    }
  }
}
