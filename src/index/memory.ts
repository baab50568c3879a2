// In-memory radix index of KV blocks, fed only by KV events.
//
// SGLang's (and Dynamo's, and vLLM's) block hashes are chained: a block's hash depends on every
// token before it, so one hash names a whole prefix and the tree's edges are the parent links
// events carry. Nodes live in one map keyed by the engine hash (the key the engine publishes and
// removes by); each node keeps its parent, the token-derived hash beside the engine hash (dual
// key, when a hasher is given) and, per worker, a 4-bit mask of the tiers holding it.
import type { BlockStoredEvent, KvEvent, Tier } from "../events/types.js";
import { columnsToBatch, type EventColumns } from "../events/native.js";
import { TIER_INDEX, TIERS } from "../events/types.js";
import type {
  ApplyResult,
  BlockInfo,
  IndexStats,
  KvIndex,
  OverlapResult,
  TierCounts,
  WorkerOverlap,
} from "./types.js";
import { zeroTiers } from "./types.js";

/**
 * Recomputes a stored event's block hashes from its token ids (dual key). `parentDigest` is the
 * parent's 32-byte digest, or null when the event starts at the root. Returns the hashes the
 * engine should have published and each page's chain digest (32 bytes a page), or null when it
 * cannot recompute (e.g. a page size the tokens do not divide into).
 */
export type TokenHasher = (
  parentDigest: Uint8Array | null,
  event: BlockStoredEvent,
) => { hashes: bigint[]; digests: Uint8Array } | null;

class Node {
  /** Tier masks, 4 bits per worker slot, slots 0..7. */
  m0 = 0;
  /** Slots 8.. in groups of 8. */
  mx: number[] | null = null;
  tokenHash: bigint | null = null;
  digest: Uint8Array | null = null;
  constructor(
    readonly hash: bigint,
    public parent: bigint | null,
  ) {}
}

function getMask(n: Node, slot: number): number {
  if (slot < 8) return (n.m0 >>> (slot << 2)) & 15;
  const g = n.mx?.[(slot >> 3) - 1] ?? 0;
  return (g >>> ((slot & 7) << 2)) & 15;
}

function setMask(n: Node, slot: number, mask: number): void {
  if (slot < 8) {
    const sh = slot << 2;
    n.m0 = ((n.m0 & ~(15 << sh)) | (mask << sh)) >>> 0;
    return;
  }
  const gi = (slot >> 3) - 1;
  if (!n.mx) n.mx = [];
  while (n.mx.length <= gi) n.mx.push(0);
  const sh = (slot & 7) << 2;
  n.mx[gi] = ((n.mx[gi] & ~(15 << sh)) | (mask << sh)) >>> 0;
}

function empty(n: Node): boolean {
  if (n.m0 !== 0) return false;
  if (n.mx) for (const g of n.mx) if (g !== 0) return false;
  return true;
}

export interface InMemoryIndexOptions {
  tokenHasher?: TokenHasher;
  /** Tier whose blocks count as the shared pool (SharedCacheHits). Default EXTERNAL. */
  sharedTier?: Tier | null;
}

export class InMemoryKvIndex implements KvIndex {
  private readonly nodes = new Map<bigint, Node>();
  private readonly slots = new Map<string, number>();
  private readonly names: string[] = [];
  /** counts[slot][tier] */
  private readonly counts: number[][] = [];
  private readonly byTokenHash = new Map<bigint, bigint>();
  private mismatches = 0;
  private readonly hasher?: TokenHasher;
  private readonly sharedBit: number;

  constructor(opts: InMemoryIndexOptions = {}) {
    this.hasher = opts.tokenHasher;
    const st = opts.sharedTier === undefined ? "EXTERNAL" : opts.sharedTier;
    this.sharedBit = st === null ? 0 : 1 << TIER_INDEX[st];
  }

  private slot(worker: string): number {
    let s = this.slots.get(worker);
    if (s === undefined) {
      s = this.names.length;
      this.slots.set(worker, s);
      this.names.push(worker);
      this.counts.push([0, 0, 0, 0]);
    }
    return s;
  }

  applyEvent(worker: string, event: KvEvent): ApplyResult {
    const r: ApplyResult = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0, hashMismatches: 0 };
    const slot = this.slot(worker);
    if (event.type === "AllBlocksCleared") {
      r.removed = this.clearSlot(slot);
      return r;
    }
    const bit = 1 << TIER_INDEX[event.tier];
    const counts = this.counts[slot];
    const t = TIER_INDEX[event.tier];
    if (event.type === "BlockRemoved") {
      for (const h of event.blockHashes) {
        const n = this.nodes.get(h);
        const m = n ? getMask(n, slot) : 0;
        if (!n || !(m & bit)) {
          r.unknownRemovals++;
          continue;
        }
        setMask(n, slot, m & ~bit);
        counts[t]--;
        r.removed++;
        if (empty(n)) this.drop(n);
      }
      return r;
    }
    // BlockStored: everything that can fail (hashing) happens before the first mutation.
    const hs = event.blockHashes;
    let tokenHashes: bigint[] | null = null;
    let digests: Uint8Array | null = null;
    const parentNode = event.parentBlockHash === null ? undefined : this.nodes.get(event.parentBlockHash);
    if (event.parentBlockHash !== null && !parentNode) r.orphanStores++;
    if (this.hasher && (event.parentBlockHash === null || parentNode?.digest)) {
      const out = this.hasher(parentNode?.digest ?? null, event);
      if (out && out.hashes.length === hs.length) {
        tokenHashes = out.hashes;
        digests = out.digests;
      }
    }
    let parent = event.parentBlockHash;
    for (let i = 0; i < hs.length; i++) {
      const h = hs[i];
      let n = this.nodes.get(h);
      if (!n) {
        n = new Node(h, parent);
        this.nodes.set(h, n);
      }
      if (tokenHashes && n.tokenHash === null) {
        n.tokenHash = tokenHashes[i];
        n.digest = (digests as Uint8Array).subarray(i * 32, i * 32 + 32);
        if (n.tokenHash !== h) {
          r.hashMismatches++;
          this.mismatches++;
          this.byTokenHash.set(n.tokenHash, h);
        }
      }
      const m = getMask(n, slot);
      if (!(m & bit)) {
        setMask(n, slot, m | bit);
        counts[t]++;
        r.added++;
      }
      parent = h;
    }
    return r;
  }

  /**
   * Fast path for natively decoded batches (src/events/native.ts): applies every event of the
   * columns without building event objects. Without a token hasher only; with one, the caller
   * converts to events (columnsToBatch) so the dual key is kept.
   */
  applyColumns(worker: string, c: EventColumns): ApplyResult {
    const r: ApplyResult = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0, hashMismatches: 0 };
    if (this.hasher) {
      for (const e of columnsToBatch(c).batch.events) {
        const x = this.applyEvent(worker, e);
        r.added += x.added;
        r.removed += x.removed;
        r.unknownRemovals += x.unknownRemovals;
        r.orphanStores += x.orphanStores;
        r.hashMismatches += x.hashMismatches;
      }
      return r;
    }
    const slot = this.slot(worker);
    const counts = this.counts[slot];
    const hs = c.hashes;
    for (let e = 0; e < c.count; e++) {
      const kind = c.kinds[e];
      if (kind === 2) {
        r.removed += this.clearSlot(slot);
        continue;
      }
      const t = c.tiers[e];
      const bit = 1 << t;
      const end = c.hashOffsets[e + 1];
      if (kind === 1) {
        for (let i = c.hashOffsets[e]; i < end; i++) {
          const n = this.nodes.get(hs[i]);
          const m = n ? getMask(n, slot) : 0;
          if (!n || !(m & bit)) {
            r.unknownRemovals++;
            continue;
          }
          setMask(n, slot, m & ~bit);
          counts[t]--;
          r.removed++;
          if (empty(n)) this.drop(n);
        }
        continue;
      }
      let parent: bigint | null = c.hasParent[e] ? c.parents[e] : null;
      if (parent !== null && !this.nodes.has(parent)) r.orphanStores++;
      for (let i = c.hashOffsets[e]; i < end; i++) {
        const h = hs[i];
        let n = this.nodes.get(h);
        if (!n) {
          n = new Node(h, parent);
          this.nodes.set(h, n);
        }
        const m = getMask(n, slot);
        if (!(m & bit)) {
          setMask(n, slot, m | bit);
          counts[t]++;
          r.added++;
        }
        parent = h;
      }
    }
    return r;
  }

  private drop(n: Node): void {
    this.nodes.delete(n.hash);
    if (n.tokenHash !== null && n.tokenHash !== n.hash) this.byTokenHash.delete(n.tokenHash);
  }

  private clearSlot(slot: number): number {
    let removed = 0;
    for (const n of this.nodes.values()) {
      const m = getMask(n, slot);
      if (m === 0) continue;
      for (let b = m; b; b &= b - 1) removed++;
      setMask(n, slot, 0);
      if (empty(n)) this.drop(n);
    }
    this.counts[slot] = [0, 0, 0, 0];
    return removed;
  }

  clearWorker(worker: string): void {
    const s = this.slots.get(worker);
    if (s !== undefined) this.clearSlot(s);
  }

  overlap(blockHashes: readonly bigint[]): OverlapResult {
    const nw = this.names.length;
    // Per slot: consecutive run per tier (alive flags as a mask), and the tiered continuation.
    const per = new Int32Array(nw * 4);
    const tiered = new Int32Array(nw * 4);
    const aliveTiers = new Uint8Array(nw).fill(15);
    const stage = new Uint8Array(nw); // 0..3 current tier of the continuation, 4 = done
    let alive = nw;
    const ranges: [number, number][] = [];
    let total = 0;
    let runStart = -1;
    const sharedBit = this.sharedBit;
    const n = blockHashes.length;
    for (let i = 0; i < n; i++) {
      const node = this.nodes.get(blockHashes[i]);
      if (!node) {
        // Chained hashes: a missing block ends every worker's prefix.
        alive = 0;
        if (runStart >= 0) { ranges.push([runStart, i]); runStart = -1; }
        if (!sharedBit) break;
        continue;
      }
      if (sharedBit) {
        let shared = false;
        for (let s = 0; s < nw && !shared; s++) if (getMask(node, s) & sharedBit) shared = true;
        if (shared) {
          total++;
          if (runStart < 0) runStart = i;
        } else if (runStart >= 0) { ranges.push([runStart, i]); runStart = -1; }
      }
      if (alive === 0) {
        if (!sharedBit) break;
        continue;
      }
      for (let s = 0; s < nw; s++) {
        let st = stage[s];
        const a = aliveTiers[s];
        if (st === 4 && a === 0) continue;
        const m = getMask(node, s);
        if (a) {
          const keep = a & m;
          if (keep & 1) per[s * 4]++;
          if (keep & 2) per[s * 4 + 1]++;
          if (keep & 4) per[s * 4 + 2]++;
          if (keep & 8) per[s * 4 + 3]++;
          aliveTiers[s] = keep;
        }
        if (st < 4) {
          while (st < 4 && !(m & (1 << st))) st++;
          if (st < 4) tiered[s * 4 + st]++;
          stage[s] = st;
        }
        if (st === 4 && aliveTiers[s] === 0) alive--;
      }
    }
    if (runStart >= 0) ranges.push([runStart, n]);
    const workers = new Map<string, WorkerOverlap>();
    for (let s = 0; s < nw; s++) {
      const o = s * 4;
      if (per[o] + per[o + 1] + per[o + 2] + per[o + 3] + tiered[o + 1] + tiered[o + 2] + tiered[o + 3] === 0) continue;
      workers.set(this.names[s], {
        perTier: { GPU: per[o], CPU_PINNED: per[o + 1], DISK: per[o + 2], EXTERNAL: per[o + 3] },
        tiered: { GPU: tiered[o], CPU_PINNED: tiered[o + 1], DISK: tiered[o + 2], EXTERNAL: tiered[o + 3] },
      });
    }
    return { requestBlocks: n, workers, shared: { ranges, totalHits: total } };
  }

  lookup(hash: bigint): BlockInfo | undefined {
    let n = this.nodes.get(hash);
    if (!n) {
      const engine = this.byTokenHash.get(hash);
      if (engine !== undefined) n = this.nodes.get(engine);
    }
    if (!n) return undefined;
    const residency = new Map<string, Tier[]>();
    for (let s = 0; s < this.names.length; s++) {
      const m = getMask(n, s);
      if (m) residency.set(this.names[s], TIERS.filter((_, i) => m & (1 << i)));
    }
    return { hash: n.hash, parent: n.parent, tokenHash: n.tokenHash, residency };
  }

  workers(): string[] {
    return [...this.names];
  }

  stats(): IndexStats {
    const workers: Record<string, TierCounts> = {};
    for (let s = 0; s < this.names.length; s++) {
      const c = this.counts[s];
      const t = zeroTiers();
      TIERS.forEach((tier, i) => (t[tier] = c[i]));
      workers[this.names[s]] = t;
    }
    return { blocks: this.nodes.size, workers, hashMismatches: this.mismatches };
  }
}
