// STAND-IN, NOT THE WORKER. An in-memory model of a worker's cache state (blocks, pins, leases,
// tool-offload epochs, dedupe window) that answers commands honestly enough for tests of the router
// side that need no SGLang server (the real one is python/kvctl_worker). It has no GPU, no radix
// tree, no scheduler: every "tier" here is a label. Never deploy it as a worker.
import type { Ack, AckStatus, Command } from "../protocol/index.js";
import { blankAck } from "../protocol/index.js";

type Tier = "GPU" | "CPU_PINNED" | "CPU_TIER1";
type CommandOf<T extends Command["type"]> = Extract<Command, { type: T }>;

interface Block {
  parent: bigint | null;
  tier: Tier;
  /** Total pin count (reference-counted, one per pin). */
  pins: number;
  /** Expiry of the pins that have a TTL (ms since epoch); the rest are untimed. */
  timedPins: number[];
  transient: boolean;
  lease: string | null;
  session: string | null;
}

interface Lease {
  hashes: bigint[];
  expiresAtMs: number | null;
}

export interface ReferenceModelOptions {
  /** Most pinned blocks at once; past it Cache pin acks `partial` (default 1 000 000). */
  pinBudgetBlocks?: number;
  /** Storage keys the model pretends its storage backend holds (for Warm). */
  storageKeys?: Iterable<string>;
  dedupeWindowMs?: number;
  dedupeMaxIds?: number;
  now?: () => number;
}

export class ReferenceWorkerModel {
  readonly blocks = new Map<bigint, Block>();
  readonly leases = new Map<string, Lease>();
  readonly sessions = new Map<string, { epoch: number; hashes: bigint[] }>();
  readonly storageKeys: Set<string>;
  private epoch = 0;
  /** Blocks that hold at least one TTL pin (what the reaper has to look at). */
  private readonly timed = new Set<bigint>();
  private readonly dedupe = new Map<string, Ack>();
  // Arrival order for expiry, as a queue (shifting a Map's oldest entries one by one makes V8
  // iterate over every deleted slot until it rehashes, which gets slow at 100 000 ids).
  private dedupeOrder: Array<{ id: string; atMs: number }> = [];
  private dedupeHead = 0;
  private readonly pinBudget: number;
  private readonly dedupeWindowMs: number;
  private readonly dedupeMax: number;
  private readonly now: () => number;

  constructor(opts: ReferenceModelOptions = {}) {
    this.pinBudget = opts.pinBudgetBlocks ?? 1_000_000;
    this.storageKeys = new Set(opts.storageKeys ?? []);
    this.dedupeWindowMs = opts.dedupeWindowMs ?? 10 * 60_000;
    this.dedupeMax = opts.dedupeMaxIds ?? 100_000;
    this.now = opts.now ?? Date.now;
  }

  /** Inserts a chain of blocks (a prefix path, parent first), all resident on GPU. */
  addPath(hashes: Iterable<bigint>): void {
    let parent: bigint | null = null;
    for (const h of hashes) {
      if (!this.blocks.has(h))
        this.blocks.set(h, {
          parent,
          tier: "GPU",
          pins: 0,
          timedPins: [],
          transient: false,
          lease: null,
          session: null,
        });
      parent = h;
    }
  }

  /** The first outcome of an id still inside the dedupe window, if any. */
  seen(id: string): Ack | undefined {
    this.expireDedupe();
    return this.dedupe.get(id);
  }

  /** Applies a validated command and returns its ack (id and elapsed_us are filled by the caller). */
  apply(workerId: string, id: string | null, cmd: Command): Ack {
    this.reap();
    const ack = this.dispatch(workerId, id, cmd);
    if (id !== null) {
      if (!this.dedupe.has(id)) this.dedupeOrder.push({ id, atMs: this.now() });
      this.dedupe.set(id, ack);
      this.expireDedupe();
    }
    return ack;
  }

  /** Pause and ToolStart: move the known blocks to the host tier under an owner; unknown ones go to `missing`. */
  private holdOnHost(hashes: readonly bigint[], ack: Ack, own: (b: Block) => void): bigint[] {
    const held: bigint[] = [];
    for (const h of hashes) {
      const b = this.blocks.get(h);
      if (!b) {
        ack.missing.push(h);
        continue;
      }
      b.tier = "CPU_PINNED";
      own(b);
      held.push(h);
      ack.affected++;
    }
    return held;
  }

  private dispatch(workerId: string, id: string | null, cmd: Command): Ack {
    const ack = blankAck(workerId, id, cmd.type, "applied");
    switch (cmd.type) {
      case "Cache":
        return this.cache(ack, cmd);
      case "Prune":
        return this.prune(ack, cmd);
      case "Think":
        return this.think(ack, cmd);
      case "Pause":
        return this.pause(ack, cmd);
      case "RenewLease":
        return this.renewLease(ack, cmd);
      case "RevokeLease":
        return this.revokeLease(ack, cmd);
      case "Warm":
        return this.warm(ack, cmd);
      case "ToolStart":
        return this.toolStart(ack, cmd);
      case "ToolEnd":
        return this.toolEnd(ack, cmd);
      case "Prefetch":
        return this.prefetch(ack, cmd);
      case "Inspect":
        return this.inspect(ack, cmd);
    }
  }

  private cache(ack: Ack, cmd: CommandOf<"Cache">): Ack {
    ack.requested = cmd.block_hashes.length;
    const expiry = cmd.ttl_seconds ? this.now() + cmd.ttl_seconds * 1000 : null;
    // Counted only when a block goes from unpinned to pinned (re-pins never need the budget).
    let pinned = -1;
    for (const h of cmd.block_hashes) {
      const b = this.blocks.get(h);
      if (!b) {
        ack.missing.push(h);
        continue;
      }
      if (cmd.pin) {
        if (b.pins === 0) {
          if (pinned < 0) pinned = this.pinnedCount();
          if (pinned >= this.pinBudget) {
            ack.skipped++;
            continue;
          }
          pinned++;
        }
        b.pins++;
        if (expiry !== null) {
          b.timedPins.push(expiry);
          this.timed.add(h);
        }
        ack.affected++;
      } else if (b.pins > 0) {
        // Untimed pins go first; a TTL pin would expire by itself anyway.
        if (b.pins === b.timedPins.length) b.timedPins.pop();
        b.pins--;
        ack.affected++;
      } else ack.skipped++;
    }
    if (cmd.pin && ack.skipped)
      ack.reason = `pin budget exhausted (${this.pinnedCount()}/${this.pinBudget} blocks)`;
    if (ack.affected) ack.tiers = { CPU_PINNED: ack.affected };
    return settle(ack);
  }

  private prune(ack: Ack, cmd: CommandOf<"Prune">): Ack {
    const root = this.blocks.get(cmd.after_block_hash);
    if (!root) {
      ack.requested = 1;
      ack.missing.push(cmd.after_block_hash);
      return settle(ack);
    }
    const doomed = this.descendants(cmd.after_block_hash);
    ack.requested = doomed.length;
    // Leaves first; a kept block keeps its ancestors too (a tree has no orphans).
    const kept = new Set<bigint>();
    for (const h of doomed.reverse()) {
      const b = this.blocks.get(h)!;
      if (kept.has(h) || ((b.pins > 0 || b.lease || b.session) && !cmd.force)) {
        ack.skipped++;
        if (b.parent !== null) kept.add(b.parent);
        continue;
      }
      this.blocks.delete(h);
      ack.affected++;
    }
    if (ack.skipped)
      ack.reason = `${ack.skipped} pinned or leased descendants kept (force not set)`;
    return settle(ack);
  }

  private think(ack: Ack, cmd: CommandOf<"Think">): Ack {
    ack.requested = cmd.block_hashes.length;
    for (const h of cmd.block_hashes) {
      const b = this.blocks.get(h);
      if (!b) {
        ack.missing.push(h);
        continue;
      }
      if (cmd.transient) {
        if (b.transient) ack.skipped++;
        else (b.transient = true), ack.affected++;
      } else {
        for (const d of this.descendants(h)) this.blocks.delete(d);
        this.blocks.delete(h);
        ack.affected++;
      }
    }
    return settle(ack);
  }

  private pause(ack: Ack, cmd: CommandOf<"Pause">): Ack {
    ack.requested = cmd.block_hashes.length;
    if (this.leases.has(cmd.lease_id))
      return reject(ack, `lease_id ${cmd.lease_id} is already held (use RenewLease)`);
    const expiresAtMs = cmd.ttl_seconds === null ? null : this.now() + cmd.ttl_seconds * 1000;
    const held = this.holdOnHost(cmd.block_hashes, ack, (b) => (b.lease = cmd.lease_id));
    if (held.length === 0) return settle(ack);
    this.leases.set(cmd.lease_id, { hashes: held, expiresAtMs });
    ack.lease = { lease_id: cmd.lease_id, expires_at_ms: expiresAtMs };
    ack.tiers = { CPU_PINNED: held.length };
    return settle(ack);
  }

  private renewLease(ack: Ack, cmd: CommandOf<"RenewLease">): Ack {
    ack.requested = 1;
    const lease = this.leases.get(cmd.lease_id);
    if (!lease) return reject(ack, `unknown lease ${cmd.lease_id}`);
    lease.expiresAtMs = this.now() + cmd.new_ttl_seconds * 1000;
    ack.affected = 1;
    ack.lease = { lease_id: cmd.lease_id, expires_at_ms: lease.expiresAtMs };
    return settle(ack);
  }

  private revokeLease(ack: Ack, cmd: CommandOf<"RevokeLease">): Ack {
    const lease = this.leases.get(cmd.lease_id);
    if (!lease) return reject(ack, `unknown lease ${cmd.lease_id}`);
    ack.requested = lease.hashes.length;
    if (cmd.purge === false) ack.affected = lease.hashes.filter((h) => this.blocks.has(h)).length;
    else for (const h of lease.hashes) if (this.blocks.delete(h)) ack.affected++;
    this.leases.delete(cmd.lease_id);
    ack.lease = { lease_id: cmd.lease_id, expires_at_ms: null };
    return settle(ack);
  }

  private warm(ack: Ack, cmd: CommandOf<"Warm">): Ack {
    ack.requested = cmd.block_keys.length;
    const unknown = cmd.block_keys.filter((k) => !this.storageKeys.has(k));
    if (!cmd.token_ids && unknown.length)
      return reject(
        ack,
        "Warm without token_ids: pages cannot be placed in the prefix tree without their tokens",
      );
    ack.affected = cmd.block_keys.length - unknown.length;
    ack.skipped = unknown.length;
    if (unknown.length) ack.reason = `${unknown.length} keys not in the storage backend`;
    if (ack.affected) ack.tiers = { [cmd.target_tier]: ack.affected };
    return settle(ack);
  }

  private toolStart(ack: Ack, cmd: CommandOf<"ToolStart">): Ack {
    ack.requested = cmd.block_hashes.length;
    const held = this.holdOnHost(cmd.block_hashes, ack, (b) => (b.session = cmd.session_id));
    ack.epoch = ++this.epoch;
    this.sessions.set(cmd.session_id, { epoch: ack.epoch, hashes: held });
    if (held.length) ack.tiers = { CPU_PINNED: held.length };
    return settle(ack);
  }

  private toolEnd(ack: Ack, cmd: CommandOf<"ToolEnd">): Ack {
    ack.requested = 1;
    const s = this.sessions.get(cmd.session_id);
    if (!s) return reject(ack, `unknown session ${cmd.session_id}`);
    if (s.epoch !== cmd.epoch) return reject(ack, `stale epoch ${cmd.epoch} (current ${s.epoch})`);
    ack.requested = s.hashes.length;
    for (const h of s.hashes) {
      const b = this.blocks.get(h);
      if (!b) {
        ack.missing.push(h);
        continue;
      }
      b.tier = "GPU";
      b.session = null;
      ack.affected++;
    }
    this.sessions.delete(cmd.session_id);
    ack.epoch = cmd.epoch;
    if (ack.affected) ack.tiers = { GPU: ack.affected };
    return settle(ack);
  }

  /** Host -> GPU for the listed blocks (and the session's offload); any unknown one refuses the whole command. */
  private prefetch(ack: Ack, cmd: CommandOf<"Prefetch">): Ack {
    const hashes = [...cmd.block_hashes];
    if (cmd.session_id != null) {
      const s = this.sessions.get(cmd.session_id);
      if (!s)
        return reject(
          ack,
          `command.session_id: no tool offload in flight for session ${cmd.session_id}`,
        );
      for (const h of s.hashes) if (!hashes.includes(h)) hashes.push(h);
    }
    ack.requested = hashes.length;
    const unknown = hashes.findIndex((h) => !this.blocks.has(h));
    if (unknown >= 0)
      return reject(
        ack,
        `command.block_hashes[${unknown}]: block ${hashes[unknown]} is not held by this worker`,
      );
    for (const h of hashes) {
      const b = this.blocks.get(h) as Block;
      if (b.tier === "GPU") continue;
      b.tier = "GPU";
      ack.affected++;
    }
    if (hashes.length) ack.tiers = { GPU: hashes.length };
    ack.status = ack.affected ? "applied" : "noop";
    return ack;
  }

  private inspect(ack: Ack, cmd: CommandOf<"Inspect">): Ack {
    const hashes = cmd.block_hashes ?? [];
    ack.requested = hashes.length;
    const tiers: Record<string, number> = {};
    for (const h of hashes) {
      const b = this.blocks.get(h);
      if (!b) ack.missing.push(h);
      else tiers[b.tier] = (tiers[b.tier] ?? 0) + 1;
    }
    // Read-only: `affected` stays 0; residency is reported in `tiers`.
    ack.tiers = tiers;
    if (cmd.lease_id) {
      const lease = this.leases.get(cmd.lease_id);
      ack.lease = lease ? { lease_id: cmd.lease_id, expires_at_ms: lease.expiresAtMs } : null;
      if (!lease) ack.reason = `unknown lease ${cmd.lease_id}`;
    }
    if (cmd.session_id) {
      const s = this.sessions.get(cmd.session_id);
      ack.epoch = s ? s.epoch : null;
    }
    ack.status = "applied";
    return ack;
  }

  private pinnedCount(): number {
    let n = 0;
    for (const b of this.blocks.values()) if (b.pins > 0) n++;
    return n;
  }

  /** Every descendant of `hash` (not the block itself), parents before children. */
  private descendants(hash: bigint): bigint[] {
    const children = new Map<bigint, bigint[]>();
    for (const [h, b] of this.blocks) {
      if (b.parent === null) continue;
      const list = children.get(b.parent);
      if (list) list.push(h);
      else children.set(b.parent, [h]);
    }
    // Breadth-first, the output list doubling as the queue.
    const out: bigint[] = [...(children.get(hash) ?? [])];
    for (let k = 0; k < out.length; k++) out.push(...(children.get(out[k]!) ?? []));
    return out;
  }

  /** Expires TTL'd pins, leases and nothing else; runs before every command (no caller needed). */
  private reap(): void {
    const now = this.now();
    for (const [id, lease] of this.leases) {
      if (lease.expiresAtMs !== null && lease.expiresAtMs <= now) {
        for (const h of lease.hashes) {
          const b = this.blocks.get(h);
          if (b && b.lease === id) b.lease = null;
        }
        this.leases.delete(id);
      }
    }
    // Only blocks holding TTL pins are visited, so untimed pins cost nothing here.
    for (const h of this.timed) {
      const b = this.blocks.get(h);
      if (!b) {
        this.timed.delete(h);
        continue;
      }
      const live = b.timedPins.filter((t) => t > now);
      b.pins -= b.timedPins.length - live.length;
      b.timedPins = live;
      if (live.length === 0) this.timed.delete(h);
    }
  }

  private expireDedupe(): void {
    const oldest = this.now() - this.dedupeWindowMs;
    const q = this.dedupeOrder;
    while (this.dedupeHead < q.length) {
      const e = q[this.dedupeHead]!;
      if (this.dedupe.size <= this.dedupeMax && e.atMs >= oldest) break;
      this.dedupe.delete(e.id);
      this.dedupeHead++;
    }
    if (this.dedupeHead > 4096 && this.dedupeHead * 2 > q.length) {
      this.dedupeOrder = q.slice(this.dedupeHead);
      this.dedupeHead = 0;
    }
  }
}

function settle(ack: Ack): Ack {
  ack.status = statusOf(ack);
  return ack;
}

function statusOf(ack: Ack): AckStatus {
  if (ack.requested === 0) return "noop";
  if (ack.affected === ack.requested) return "applied";
  return ack.affected > 0 ? "partial" : "noop";
}

function reject(ack: Ack, reason: string): Ack {
  ack.status = "rejected";
  ack.reason = reason;
  return ack;
}
