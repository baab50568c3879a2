// Which tenants have stood on each block of each worker lately: every session (this replica's
// turns, and every replica's through the shared session bucket), and sessionless requests within a
// window. The eviction guard (evict-guard.ts) reads it so that no tenant's prune, purge or demote
// removes a block another tenant's traffic still uses. Block hashes chain their prefix, so whoever
// stands on a block below another stands on that one too: a block nobody else uses has no one else
// below it either.
import { Gauge, type Registry } from "prom-client";
import type { Clock } from "../core/clock.js";

/** A tenant's sessionless requests count as one user of the blocks they stood on. */
const SESSIONLESS = "\u0000sessionless";

/** A user of blocks: its tenant ("" for none: auth off, or the admin key) and who in it. */
const userOf = (tenant: string | null, who: string) => `${tenant ?? ""}\u0001${who}`;
const tenantPart = (user: string) => user.slice(0, user.indexOf("\u0001"));

/**
 * How long a sessionless request's blocks count as in use: the prompt-cache lifetime clients are
 * promised by default (Anthropic's ephemeral marker, OpenAI's in-memory retention: 5 minutes), or
 * the request's own marker TTL when it asked for longer.
 */
export const SESSIONLESS_WINDOW_MS = 5 * 60_000;

export interface BlockUseOptions {
  clock: Clock;
  /** A session's blocks count as long as its record lives (sessions.ttlSeconds; 0: no expiry). */
  sessionTtlMs: number;
  /** `worker block` pairs remembered, least recently used forgotten first. */
  cap?: number;
  registry: Registry;
}

export class BlockUse {
  /** `worker block` -> user -> in use until (ms), in order of last use. */
  private readonly users = new Map<string, Map<string, number>>();
  /** Each session's last chain, as `worker block` keys, and the user it stands there as. */
  private readonly chains = new Map<string, { keys: string[]; user: string; tenant: string }>();
  private readonly cap: number;

  constructor(private readonly o: BlockUseOptions) {
    this.cap = o.cap ?? 250_000;
    const known = this;
    new Gauge({
      name: "kvctl_gateway_block_use_sessions",
      help: "Sessions (of every replica) whose blocks the eviction guard protects from other tenants' evictions",
      registers: [o.registry],
      collect() {
        this.set(known.chains.size);
      },
    });
  }

  /** A session's sequence as its last turn left it (it replaces the one before). */
  session(
    id: string,
    tenant: string | null,
    worker: string,
    chain: readonly (bigint | string)[],
    lastMs: number,
  ): void {
    this.forget(id);
    const keys = chain.map((h) => `${worker} ${h}`);
    const user = userOf(tenant, id);
    this.chains.set(id, { keys, user, tenant: tenant ?? "" });
    const until = this.o.sessionTtlMs > 0 ? lastMs + this.o.sessionTtlMs : Number.MAX_SAFE_INTEGER;
    for (const k of keys) this.use(k, user, until);
  }

  /** A tenant's sessionless request's sequence, in use for `windowMs` from `atMs`. */
  sessionless(
    tenant: string | null,
    worker: string,
    chain: readonly bigint[],
    atMs: number,
    windowMs: number,
  ): void {
    const user = userOf(tenant, SESSIONLESS);
    for (const h of chain) this.use(`${worker} ${h}`, user, atMs + windowMs);
  }

  /** A session whose record is gone. */
  forget(id: string): void {
    const c = this.chains.get(id);
    if (!c) return;
    this.chains.delete(id);
    for (const k of c.keys) this.users.get(k)?.delete(c.user);
  }

  /** The tenant a session stands as ("" for none), or null when this table has not seen it. */
  tenantOf(id: string): string | null {
    return this.chains.get(id)?.tenant ?? null;
  }

  /** Whether a tenant other than `tenant` ("" for none) uses the block now. */
  usedByOthers(worker: string, block: bigint | string, tenant: string): boolean {
    const m = this.users.get(`${worker} ${block}`);
    if (!m) return false;
    const now = this.o.clock.now();
    for (const [u, until] of m) if (until > now && tenantPart(u) !== tenant) return true;
    return false;
  }

  /** The session's last chain on the worker (empty when unknown or on another worker). */
  chainOf(id: string, worker: string): bigint[] {
    const prefix = `${worker} `;
    return (this.chains.get(id)?.keys ?? [])
      .filter((k) => k.startsWith(prefix))
      .map((k) => BigInt(k.slice(prefix.length)));
  }

  private use(key: string, user: string, until: number): void {
    const m = this.users.get(key) ?? new Map<string, number>();
    this.users.delete(key);
    m.set(user, Math.max(m.get(user) ?? 0, until));
    this.users.set(key, m);
    // A forgotten block reads as nobody's: the bound sits far above what a replica routes.
    while (this.users.size > this.cap) this.users.delete(this.users.keys().next().value as string);
  }
}
