// The TypeScript index kvctl used before the native one (native/index), kept unchanged in
// behaviour as bench:index's baseline: same inputs, measured in the same run. Not exported by
// the package.
//
// In-memory radix index of KV blocks, fed only by KV events.
//
// SGLang's (and Dynamo's, and vLLM's) block hashes are chained: a block's hash depends on every
// token before it, so one hash names a whole prefix, and the tree's edges are the parent links
// events carry. Nodes are keyed by the engine hash (what the engine publishes and removes by);
// each node keeps its parent's hash, the token-derived hash beside the engine hash (dual key,
// when a hasher is given) and, per worker, a 4-bit mask of the tiers holding it.
//
// Layout, for speed and memory at 10M+ blocks: an open-addressing hash table over the 64-bit
// hashes split into two int32 halves (no BigInt is created on the hot paths: columns from the
// native decoder and requests as BigInt64Array are read through Int32Array views), and nodes as
// rows of typed arrays with a free list.
import { columnsToBatch, type EventColumns } from "../../src/events/native.js";
import type { BlockStoredEvent, KvEvent, Tier } from "../../src/events/types.js";
import { TIER_INDEX, TIERS } from "../../src/events/types.js";
import type {
  ApplyResult,
  BlockInfo,
  IndexStats,
  OverlapResult,
  TierCounts,
  WorkerOverlap,
} from "../../src/index/types.js";
import { addApplyResult, emptyApplyResult, zeroTiers } from "../../src/index/types.js";

/**
 * Recomputes a stored event's block hashes from its token ids (dual key). `parentDigest` is the
 * parent's 32-byte digest, or null when the event starts at the root. Returns the hashes the
 * engine should have published and each page's chain digest (32 bytes a page), or null when it
 * cannot recompute.
 */
export type TokenHasher = (
  parentDigest: Uint8Array | null,
  event: BlockStoredEvent,
) => { hashes: bigint[]; digests: Uint8Array } | null;

const EMPTY = -1;
const TOMB = -2;

const s64 = new BigInt64Array(1);
const s32 = new Int32Array(s64.buffer);

function mix(lo: number, hi: number): number {
  let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
  h ^= h >>> 15;
  return Math.imul(h, 0xc2b2ae35) ^ (h >>> 13);
}

/**
 * 64-bit key (two int32 halves) -> node id, linear probing with tombstones. A slot is 8 bytes,
 * [lo, id]: the high half is checked against the node row (`nodeHi`), which is only read when the
 * low halves match. Small slots keep the table at 8 bytes x capacity, so the one random access a
 * lookup costs (the request-scoring path is one lookup per block) misses the TLB less often.
 */
class Table {
  mask: number;
  s: Int32Array;
  used = 0; // live + tombstones
  nodeHi: Int32Array;
  constructor(nodeHi: Int32Array, cap = 1 << 16) {
    this.mask = cap - 1;
    this.s = Table.alloc(cap);
    this.nodeHi = nodeHi;
  }
  private static alloc(cap: number): Int32Array {
    const s = new Int32Array(cap * 2);
    for (let i = 1; i < s.length; i += 2) s[i] = EMPTY;
    return s;
  }
  find(lo: number, hi: number): number {
    const s = this.s;
    const mask = this.mask;
    let i = mix(lo, hi) & mask;
    for (;;) {
      const v = s[(i << 1) + 1];
      if (v === EMPTY) return -1;
      if (s[i << 1] === lo && v >= 0 && this.nodeHi[v] === hi) return v;
      i = (i + 1) & mask;
    }
  }
  /** Inserts a key known to be absent (its node row must already hold `hi`). */
  insert(lo: number, hi: number, id: number): void {
    if ((this.used + 1) * 10 > (this.mask + 1) * 6) this.rehash();
    const s = this.s;
    const mask = this.mask;
    let i = mix(lo, hi) & mask;
    while (s[(i << 1) + 1] >= 0) i = (i + 1) & mask;
    if (s[(i << 1) + 1] === EMPTY) this.used++;
    s[i << 1] = lo;
    s[(i << 1) + 1] = id;
  }
  remove(lo: number, hi: number): void {
    const s = this.s;
    const mask = this.mask;
    let i = mix(lo, hi) & mask;
    for (;;) {
      const v = s[(i << 1) + 1];
      if (v === EMPTY) return;
      if (s[i << 1] === lo && v >= 0 && this.nodeHi[v] === hi) {
        s[(i << 1) + 1] = TOMB;
        return;
      }
      i = (i + 1) & mask;
    }
  }
  private rehash(): void {
    const old = this.s;
    let live = 0;
    for (let o = 1; o < old.length; o += 2) if (old[o] >= 0) live++;
    let cap = old.length >> 1;
    while (live * 10 > cap * 3) cap *= 2; // back to <= 30% full
    this.mask = cap - 1;
    this.s = Table.alloc(cap);
    this.used = 0;
    for (let o = 0; o < old.length; o += 2) {
      const id = old[o + 1];
      if (id >= 0) this.insert(old[o], this.nodeHi[id], id);
    }
  }
}

export interface InMemoryIndexOptions {
  tokenHasher?: TokenHasher;
  /** Tier whose blocks count as the shared pool (SharedCacheHits). Default EXTERNAL; null: none. */
  sharedTier?: Tier | null;
  /** Blocks to size for up front (sum of the workers' cache sizes), saving rehashes while it fills. */
  expectedBlocks?: number;
}

export class TsKvIndex {
  // Node rows.
  private cap: number;
  private lo: Int32Array;
  private hi: Int32Array;
  private readonly table: Table;
  private plo: Int32Array;
  private phi: Int32Array;
  private hasParent: Uint8Array;
  /** Tier masks: masks[g][id] holds worker slots 8g..8g+7, 4 bits each. */
  private masks: Uint32Array[];
  private top = 0;
  private free: number[] = [];
  private live = 0;

  private readonly slots = new Map<string, number>();
  private readonly names: string[] = [];
  private readonly counts: number[][] = [];
  // Dual key (only with a hasher).
  private readonly dual = new Map<number, { tokenHash: bigint; digest: Uint8Array }>();
  private readonly byTokenHash = new Map<bigint, bigint>();
  private mismatches = 0;
  private readonly hasher?: TokenHasher;
  private readonly sharedBit: number;
  private req = new BigInt64Array(256);
  private qPer = new Int32Array(0);
  private qTiered = new Int32Array(0);
  private qAlive = new Uint8Array(0);
  private qStage = new Uint8Array(0);
  private qIds = new Int32Array(0);

  get needsTokens(): boolean {
    return this.hasher !== undefined;
  }

  constructor(opts: InMemoryIndexOptions = {}) {
    const want = Math.max(1 << 16, opts.expectedBlocks ?? 0);
    let cap = 1 << 16;
    while (cap < want) cap *= 2;
    this.cap = cap;
    this.lo = new Int32Array(cap);
    this.hi = new Int32Array(cap);
    this.plo = new Int32Array(cap);
    this.phi = new Int32Array(cap);
    this.hasParent = new Uint8Array(cap);
    this.masks = [new Uint32Array(cap)];
    let tcap = 1 << 16;
    while (tcap * 3 < want * 10) tcap *= 2; // <= 30% full at the expected size
    this.table = new Table(this.hi, tcap);
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
      while (this.masks.length <= s >> 3) this.masks.push(new Uint32Array(this.cap));
    }
    return s;
  }

  private grow(): void {
    const cap = this.cap * 2;
    const g = <T extends Int32Array | Uint8Array | Uint32Array>(
      a: T,
      make: (n: number) => T,
    ): T => {
      const b = make(cap);
      b.set(a);
      return b;
    };
    this.lo = g(this.lo, (n) => new Int32Array(n));
    this.hi = g(this.hi, (n) => new Int32Array(n));
    this.table.nodeHi = this.hi;
    this.plo = g(this.plo, (n) => new Int32Array(n));
    this.phi = g(this.phi, (n) => new Int32Array(n));
    this.hasParent = g(this.hasParent, (n) => new Uint8Array(n));
    this.masks = this.masks.map((m) => g(m, (n) => new Uint32Array(n)));
    this.cap = cap;
  }

  private getMask(id: number, slot: number): number {
    return (this.masks[slot >> 3][id] >>> ((slot & 7) << 2)) & 15;
  }

  private setMask(id: number, slot: number, mask: number): void {
    const m = this.masks[slot >> 3];
    const sh = (slot & 7) << 2;
    m[id] = ((m[id] & ~(15 << sh)) | (mask << sh)) >>> 0;
  }

  private isEmpty(id: number): boolean {
    for (const m of this.masks) if (m[id] !== 0) return false;
    return true;
  }

  private newNode(lo: number, hi: number, hasParent: boolean, plo: number, phi: number): number {
    let id = this.free.pop();
    if (id === undefined) {
      if (this.top === this.cap) this.grow();
      id = this.top++;
    }
    this.lo[id] = lo;
    this.hi[id] = hi;
    this.hasParent[id] = hasParent ? 1 : 0;
    this.plo[id] = plo;
    this.phi[id] = phi;
    for (const m of this.masks) m[id] = 0;
    this.table.insert(lo, hi, id);
    this.live++;
    return id;
  }

  private drop(id: number): void {
    this.table.remove(this.lo[id], this.hi[id]);
    const d = this.dual.get(id);
    if (d) {
      this.dual.delete(id);
      s32[0] = this.lo[id];
      s32[1] = this.hi[id];
      if (d.tokenHash !== s64[0]) this.byTokenHash.delete(d.tokenHash);
    }
    this.free.push(id);
    this.live--;
  }

  /** Stores hash words h32[2*start..2*end) for a slot; returns node ids when `ids` is given. */
  private storeRun(
    slot: number,
    t: number,
    h32: Int32Array,
    start: number,
    end: number,
    parent: [boolean, number, number],
    r: ApplyResult,
    ids?: number[],
  ): void {
    const bit = 1 << t;
    const counts = this.counts[slot];
    let [hp, plo, phi] = parent;
    if (hp && this.table.find(plo, phi) < 0) r.orphanStores++;
    for (let i = start; i < end; i++) {
      const lo = h32[2 * i];
      const hi = h32[2 * i + 1];
      let id = this.table.find(lo, hi);
      if (id < 0) id = this.newNode(lo, hi, hp, plo, phi);
      const m = this.getMask(id, slot);
      if (!(m & bit)) {
        this.setMask(id, slot, m | bit);
        counts[t]++;
        r.added++;
      }
      ids?.push(id);
      hp = true;
      plo = lo;
      phi = hi;
    }
  }

  private removeRun(
    slot: number,
    t: number,
    h32: Int32Array,
    start: number,
    end: number,
    r: ApplyResult,
  ): void {
    const bit = 1 << t;
    const counts = this.counts[slot];
    for (let i = start; i < end; i++) {
      const id = this.table.find(h32[2 * i], h32[2 * i + 1]);
      const m = id < 0 ? 0 : this.getMask(id, slot);
      if (!(m & bit)) {
        r.unknownRemovals++;
        continue;
      }
      this.setMask(id, slot, m & ~bit);
      counts[t]--;
      r.removed++;
      if (this.isEmpty(id)) this.drop(id);
    }
  }

  private words(hashes: readonly bigint[]): Int32Array {
    if (this.req.length < hashes.length) this.req = new BigInt64Array(hashes.length * 2);
    const b = this.req;
    for (let i = 0; i < hashes.length; i++) b[i] = hashes[i];
    return new Int32Array(b.buffer, 0, hashes.length * 2);
  }

  private digestOf(hash: bigint): Uint8Array | null {
    s64[0] = hash;
    const id = this.table.find(s32[0], s32[1]);
    return id < 0 ? null : (this.dual.get(id)?.digest ?? null);
  }

  applyEvent(worker: string, event: KvEvent): ApplyResult {
    const r = emptyApplyResult();
    const slot = this.slot(worker);
    if (event.type === "AllBlocksCleared") {
      r.removed = this.clearSlot(slot);
      return r;
    }
    const t = TIER_INDEX[event.tier];
    if (event.type === "BlockRemoved") {
      this.removeRun(slot, t, this.words(event.blockHashes), 0, event.blockHashes.length, r);
      return r;
    }
    // BlockStored: everything that can fail (hashing) happens before the first mutation.
    let tokenHashes: bigint[] | null = null;
    let digests: Uint8Array | null = null;
    if (this.hasher) {
      const pd = event.parentBlockHash === null ? null : this.digestOf(event.parentBlockHash);
      if (event.parentBlockHash === null || pd) {
        const out = this.hasher(pd, event);
        if (out && out.hashes.length === event.blockHashes.length) {
          tokenHashes = out.hashes;
          digests = out.digests;
        }
      }
    }
    let parent: [boolean, number, number] = [false, 0, 0];
    if (event.parentBlockHash !== null) {
      s64[0] = event.parentBlockHash;
      parent = [true, s32[0], s32[1]];
    }
    const ids: number[] | undefined = tokenHashes ? [] : undefined;
    this.storeRun(
      slot,
      t,
      this.words(event.blockHashes),
      0,
      event.blockHashes.length,
      parent,
      r,
      ids,
    );
    if (tokenHashes && ids && digests) {
      ids.forEach((id, i) => {
        if (this.dual.has(id)) return;
        const th = (tokenHashes as bigint[])[i];
        this.dual.set(id, {
          tokenHash: th,
          digest: (digests as Uint8Array).subarray(i * 32, i * 32 + 32),
        });
        if (th !== event.blockHashes[i]) {
          r.hashMismatches++;
          this.mismatches++;
          this.byTokenHash.set(th, event.blockHashes[i]);
        }
      });
    }
    return r;
  }

  /**
   * Fast path for natively decoded batches (src/events/native.ts): applies every event of the
   * columns without building event objects or BigInts. With a token hasher the columns are turned
   * into events first, so the dual key is kept.
   */
  applyColumns(worker: string, c: EventColumns): ApplyResult {
    const r = emptyApplyResult();
    if (this.hasher) {
      for (const e of columnsToBatch(c).batch.events) {
        addApplyResult(r, this.applyEvent(worker, e));
      }
      return r;
    }
    const slot = this.slot(worker);
    const h32 = new Int32Array(c.hashes.buffer, c.hashes.byteOffset, c.hashes.length * 2);
    const p32 = new Int32Array(c.parents.buffer, c.parents.byteOffset, c.parents.length * 2);
    for (let e = 0; e < c.count; e++) {
      const kind = c.kinds[e];
      if (kind === 2) r.removed += this.clearSlot(slot);
      else if (kind === 1)
        this.removeRun(slot, c.tiers[e], h32, c.hashOffsets[e], c.hashOffsets[e + 1], r);
      else
        this.storeRun(
          slot,
          c.tiers[e],
          h32,
          c.hashOffsets[e],
          c.hashOffsets[e + 1],
          [c.hasParent[e] === 1, p32[2 * e], p32[2 * e + 1]],
          r,
        );
    }
    return r;
  }

  private clearSlot(slot: number): number {
    let removed = 0;
    const m = this.masks[slot >> 3];
    const sh = (slot & 7) << 2;
    for (let id = 0; id < this.top; id++) {
      const bits = (m[id] >>> sh) & 15;
      if (bits === 0) continue;
      for (let b = bits; b; b &= b - 1) removed++;
      m[id] = (m[id] & ~(15 << sh)) >>> 0;
      if (this.isEmpty(id)) this.drop(id);
    }
    this.counts[slot] = [0, 0, 0, 0];
    return removed;
  }

  clearWorker(worker: string): void {
    const s = this.slots.get(worker);
    if (s !== undefined) this.clearSlot(s);
  }

  overlap(blockHashes: readonly bigint[] | BigInt64Array): OverlapResult {
    const n = blockHashes.length;
    const h32 =
      blockHashes instanceof BigInt64Array
        ? new Int32Array(blockHashes.buffer, blockHashes.byteOffset, n * 2)
        : this.words(blockHashes as readonly bigint[]);
    const nw = this.names.length;
    this.resetScratch(nw);
    // Phase 1: all lookups in a tight loop, so the CPU overlaps their cache misses.
    const ids = this.lookupAll(h32, n);
    // Phase 2: each worker's prefix per tier, and the shared ranges.
    const shared = this.walk(ids, n, nw);
    return { requestBlocks: n, workers: this.workerOverlaps(nw), shared };
  }

  /** Scratch reused across queries (no allocation on the scoring path but the result itself). */
  private resetScratch(nw: number): void {
    if (this.qPer.length < nw * 4) {
      this.qPer = new Int32Array(nw * 8);
      this.qTiered = new Int32Array(nw * 8);
      this.qAlive = new Uint8Array(nw * 2);
      this.qStage = new Uint8Array(nw * 2);
    }
    this.qPer.fill(0, 0, nw * 4);
    this.qTiered.fill(0, 0, nw * 4);
    this.qAlive.fill(15, 0, nw);
    this.qStage.fill(0, 0, nw); // 0..3 current tier of the continuation, 4 = done
  }

  private lookupAll(h32: Int32Array, n: number): Int32Array {
    if (this.qIds.length < n) this.qIds = new Int32Array(n * 2);
    const ids = this.qIds;
    const table = this.table;
    for (let i = 0; i < n; i++) {
      const id = table.find(h32[2 * i], h32[2 * i + 1]);
      ids[i] = id;
      if (id < 0 && !this.sharedBit) {
        for (let j = i + 1; j < n; j++) ids[j] = -1;
        break;
      }
    }
    return ids;
  }

  private walk(ids: Int32Array, n: number, nw: number): OverlapResult["shared"] {
    let alive = nw;
    const ranges: [number, number][] = [];
    let total = 0;
    let runStart = -1;
    const sharedBit = this.sharedBit;
    const groups = this.masks;
    const ng = groups.length;
    // shared-tier bit replicated in every 4-bit lane
    const sharedLanes = sharedBit * 0x11111111;
    for (let i = 0; i < n; i++) {
      const id = ids[i];
      if (id < 0) {
        // Chained hashes: a missing block ends every worker's prefix.
        alive = 0;
        if (runStart >= 0) {
          ranges.push([runStart, i]);
          runStart = -1;
        }
        if (!sharedBit) break;
        continue;
      }
      if (sharedBit) {
        let shared = false;
        for (let g = 0; g < ng && !shared; g++) if (groups[g][id] & sharedLanes) shared = true;
        if (shared) {
          total++;
          if (runStart < 0) runStart = i;
        } else if (runStart >= 0) {
          ranges.push([runStart, i]);
          runStart = -1;
        }
      }
      if (alive === 0) {
        if (!sharedBit) break;
        continue;
      }
      alive -= this.advance(id, nw);
    }
    if (runStart >= 0) ranges.push([runStart, n]);
    return { ranges, totalHits: total };
  }

  /** One block of every worker's continuation; returns how many workers it ended. */
  private advance(id: number, nw: number): number {
    const per = this.qPer;
    const tiered = this.qTiered;
    const aliveTiers = this.qAlive;
    const stage = this.qStage;
    const groups = this.masks;
    let ended = 0;
    for (let g = 0; g < groups.length; g++) {
      const word = groups[g][id];
      const base = g << 3;
      const lim = Math.min(8, nw - base);
      for (let k = 0; k < lim; k++) {
        const s = base + k;
        let st = stage[s];
        const a = aliveTiers[s];
        if (st === 4 && a === 0) continue;
        const m = (word >>> (k << 2)) & 15;
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
        if (st === 4 && aliveTiers[s] === 0) ended++;
      }
    }
    return ended;
  }

  private workerOverlaps(nw: number): Map<string, WorkerOverlap> {
    const per = this.qPer;
    const tiered = this.qTiered;
    const workers = new Map<string, WorkerOverlap>();
    for (let s = 0; s < nw; s++) {
      const o = s * 4;
      if (
        per[o] +
          per[o + 1] +
          per[o + 2] +
          per[o + 3] +
          tiered[o + 1] +
          tiered[o + 2] +
          tiered[o + 3] ===
        0
      )
        continue;
      workers.set(this.names[s], {
        perTier: { GPU: per[o], CPU_PINNED: per[o + 1], DISK: per[o + 2], EXTERNAL: per[o + 3] },
        tiered: {
          GPU: tiered[o],
          CPU_PINNED: tiered[o + 1],
          DISK: tiered[o + 2],
          EXTERNAL: tiered[o + 3],
        },
      });
    }
    return workers;
  }

  lookup(hash: bigint): BlockInfo | undefined {
    s64[0] = hash;
    let id = this.table.find(s32[0], s32[1]);
    if (id < 0) {
      const engine = this.byTokenHash.get(hash);
      if (engine === undefined) return undefined;
      s64[0] = engine;
      id = this.table.find(s32[0], s32[1]);
      if (id < 0) return undefined;
    }
    const residency = new Map<string, Tier[]>();
    for (let s = 0; s < this.names.length; s++) {
      const m = this.getMask(id, s);
      if (m)
        residency.set(
          this.names[s],
          TIERS.filter((_, i) => m & (1 << i)),
        );
    }
    s32[0] = this.lo[id];
    s32[1] = this.hi[id];
    const h = s64[0];
    let parent: bigint | null = null;
    if (this.hasParent[id]) {
      s32[0] = this.plo[id];
      s32[1] = this.phi[id];
      parent = s64[0];
    }
    return { hash: h, parent, tokenHash: this.dual.get(id)?.tokenHash ?? null, residency };
  }

  workers(): string[] {
    return [...this.names];
  }

  stats(): IndexStats {
    const workers: Record<string, TierCounts> = {};
    for (let s = 0; s < this.names.length; s++) {
      const c = this.counts[s];
      const t = zeroTiers();
      TIERS.forEach((tier, i) => {
        t[tier] = c[i];
      });
      workers[this.names[s]] = t;
    }
    return { blocks: this.live, workers, hashMismatches: this.mismatches };
  }
}
