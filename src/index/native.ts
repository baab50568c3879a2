// The index, held in native code (native/index): blocks keyed by engine hash, per worker and
// tier, with parent links, Dynamo's overlap and scoring, and (verification on) the token-derived
// hash beside the engine hash. KV-event frames are applied in one addon call each
// (decode + verify + apply); TypeScript sees counts, never per-block objects.
import { addonPart } from "../addon.js";
import {
  BAD_EVENT_KINDS,
  BATCH_ERRORS,
  FRAME_SLOT,
  FRAME_SLOTS,
  WORKER_BAD_BATCHES_AT,
  WORKER_BAD_EVENTS_AT,
  WORKER_COUNTER,
  WORKER_STAT_SLOTS,
} from "../native-tables.js";
import { columnsOf, columnsToBatch, type NativeResult } from "../events/native.js";
import {
  BatchDecodeError,
  type DecodedBatch,
  TIER_INDEX,
  TIERS,
  type Tier,
} from "../events/types.js";
import {
  DEFAULT_SCORING,
  type ScoringConfig,
  type WorkerLoad,
  type WorkerScore,
} from "./scoring.js";
import type {
  ApplyResult,
  BlockInfo,
  FrameIndex,
  FrameResult,
  IndexStats,
  OverlapResult,
  TierCounts,
  WorkerCounters,
  WorkerOverlap,
} from "./types.js";

type NativeVerdict = null | { error: string; kind: string } | { bad: FrameResult["bad"] };

interface NativeBlockIndex {
  applyFrame(slot: number, payload: Uint8Array, out: Float64Array): NativeVerdict;
  applyFrames(
    slots: Uint32Array,
    payloads: Uint8Array[],
    out: Float64Array,
  ): null | NativeVerdict[];
  applyFrameColumns(
    slot: number,
    payload: Uint8Array,
    out: Float64Array,
    columns: Uint8Array,
  ): NativeResult;
  store(
    slot: number,
    tier: number,
    hashes: BigInt64Array,
    hasParent: boolean,
    parent: bigint,
    out: Float64Array,
  ): void;
  remove(slot: number, tier: number, hashes: BigInt64Array, out: Float64Array): void;
  clear(slot: number): number;
  overlapInto(hashes: BigInt64Array, out: Int32Array): number;
  scoreInto(
    hashes: BigInt64Array,
    candidates: Uint32Array,
    params: Float64Array,
    out: Float64Array,
  ): void;
  lookup(
    hash: bigint,
  ): null | { hash: bigint; parent: bigint | null; tokenHash: bigint | null; masks: Uint8Array };
  workerStats(slot: number, out: Float64Array): void;
  blocks(): number;
  memoryBytes(): number;
}

export interface IndexOptions {
  /**
   * Recompute every BlockStored's hashes from its token ids (SGLang's page chain, from the
   * parent's digest or the cache_salt seed) and keep the token-derived hash beside the engine
   * hash; mismatches are counted. LoRA-namespaced events count as unverifiable.
   */
  verify?: boolean;
  /** Tier whose blocks count as the shared pool (SharedCacheHits). Default EXTERNAL; null: none. */
  sharedTier?: Tier | null;
  /** Blocks to size for up front (sum of the workers' cache sizes), saving rehashes while it fills. */
  expectedBlocks?: number;
  /** A frame with more events than this is refused whole and counted. Default 65536. */
  maxEvents?: number;
  /** A frame larger than this is refused whole and counted. Default 64 MiB. */
  maxBytes?: number;
}

function words(
  hashes: readonly bigint[] | BigInt64Array,
  scratch: { a: BigInt64Array },
): BigInt64Array {
  if (hashes instanceof BigInt64Array) return hashes;
  if (scratch.a.length < hashes.length) scratch.a = new BigInt64Array(hashes.length * 2);
  const b = scratch.a;
  for (let i = 0; i < hashes.length; i++) b[i] = hashes[i];
  return b.subarray(0, hashes.length);
}

/** A frame's FrameResult from the addon's verdict and its FRAME_SLOTS counts at c[o..]. */
function frameResult(r: NativeVerdict, c: Float64Array, o: number): FrameResult {
  const refused = r !== null && "error" in r;
  const at = (slot: keyof typeof FRAME_SLOT) => c[o + FRAME_SLOT[slot]];
  const dpRank = at("dpRank");
  return {
    ok: !refused,
    error: refused ? r.error : null,
    errorKind: refused ? r.kind : null,
    ts: at("ts"),
    dpRank: Number.isNaN(dpRank) ? null : dpRank,
    events: at("events"),
    storedEvents: at("storedEvents"),
    removedEvents: at("removedEvents"),
    clearedEvents: at("clearedEvents"),
    storedBlocks: at("storedBlocks"),
    removedBlocks: at("removedBlocks"),
    added: at("added"),
    removed: at("removed"),
    unknownRemovals: at("unknownRemovals"),
    orphanStores: at("orphanStores"),
    hashMismatches: at("hashMismatches"),
    verified: at("verified"),
    unverifiable: at("unverifiable"),
    badEvents: at("badEvents"),
    bad: r !== null && "bad" in r ? r.bad : [],
  };
}

export class InMemoryKvIndex implements FrameIndex {
  private readonly idx: NativeBlockIndex;
  private readonly slots = new Map<string, number>();
  private readonly names: string[] = [];
  private readonly counts = new Float64Array(FRAME_SLOTS);
  private frameSlots = new Uint32Array(16);
  private frameCounts = new Float64Array(256);
  private readonly req = { a: new BigInt64Array(256) };
  private ov = new Int32Array(1024);
  private cand = new Uint32Array(16);
  private params = new Float64Array(10 + 4 * 16); // blockSize, the 9 config fields, 4 load fields per candidate
  private scores = new Float64Array(96);
  private readonly ws = new Float64Array(WORKER_STAT_SLOTS);

  constructor(opts: IndexOptions = {}) {
    const Ctor = addonPart<{ KvBlockIndex: new (o: object) => NativeBlockIndex }>("index", [
      "KvBlockIndex",
    ]).KvBlockIndex;
    const st = opts.sharedTier === undefined ? "EXTERNAL" : opts.sharedTier;
    this.idx = new Ctor({
      verify: opts.verify ?? false,
      sharedTier: st === null ? -1 : TIER_INDEX[st],
      expectedBlocks: opts.expectedBlocks ?? 0,
      maxEvents: opts.maxEvents,
      maxBytes: opts.maxBytes,
    });
  }

  private slot(worker: string): number {
    let s = this.slots.get(worker);
    if (s === undefined) {
      s = this.names.length;
      if (s >= 4096) throw new RangeError("the index holds at most 4096 workers");
      this.slots.set(worker, s);
      this.names.push(worker);
    }
    return s;
  }

  private result(): ApplyResult {
    const c = this.counts;
    const f = FRAME_SLOT;
    return {
      added: c[f.added],
      removed: c[f.removed],
      unknownRemovals: c[f.unknownRemovals],
      orphanStores: c[f.orphanStores],
      hashMismatches: c[f.hashMismatches],
    };
  }

  applyFrame(worker: string, payload: Uint8Array): FrameResult {
    return frameResult(
      this.idx.applyFrame(this.slot(worker), payload, this.counts),
      this.counts,
      0,
    );
  }

  /**
   * applyFrame, and the frame's events as decodeBatch would return them (null for a refused
   * frame), from the one decode: for a consumer whose listeners want the events as well.
   */
  applyFrameDecoded(
    worker: string,
    payload: Uint8Array,
  ): { result: FrameResult; batch: DecodedBatch | null } {
    const slot = this.slot(worker);
    let refused: NativeVerdict = null;
    let batch: DecodedBatch | null = null;
    try {
      const cols = columnsOf(payload, true, (out) => {
        const r = this.idx.applyFrameColumns(slot, payload, this.counts, out);
        if (typeof r === "object" && "error" in r) refused = r;
        return r;
      });
      batch = columnsToBatch(cols);
    } catch (e) {
      // A refused frame; or (scratch too small, the decoder alone refusing what the index's
      // limits let through) applied but without its events: then bad lists only what is counted.
      if (!(e instanceof BatchDecodeError)) throw e;
    }
    const bad = batch?.bad ?? [];
    return {
      result: frameResult(refused ?? (bad.length > 0 ? { bad } : null), this.counts, 0),
      batch,
    };
  }

  /**
   * Frames of several workers at once (what a consumer read from its sockets in one event-loop
   * turn), applied as applyFrame would apply them one after the other. With verification on, the
   * hash chains of two frames that cannot affect each other (other workers, no block in common)
   * are recomputed side by side in two SHA-256 lanes.
   */
  applyFrames(frames: readonly { worker: string; payload: Uint8Array }[]): FrameResult[] {
    const k = frames.length;
    if (this.frameSlots.length < k) {
      this.frameSlots = new Uint32Array(k * 2);
      this.frameCounts = new Float64Array(k * 2 * FRAME_SLOTS);
    }
    const payloads: Uint8Array[] = new Array(k);
    for (let i = 0; i < k; i++) {
      this.frameSlots[i] = this.slot(frames[i].worker);
      payloads[i] = frames[i].payload;
    }
    const r = this.idx.applyFrames(this.frameSlots.subarray(0, k), payloads, this.frameCounts);
    const out: FrameResult[] = new Array(k);
    for (let i = 0; i < k; i++)
      out[i] = frameResult(r === null ? null : r[i], this.frameCounts, FRAME_SLOTS * i);
    return out;
  }

  add(
    worker: string,
    tier: Tier,
    hashes: readonly bigint[] | BigInt64Array,
    parent: bigint | null = null,
  ): ApplyResult {
    this.idx.store(
      this.slot(worker),
      TIER_INDEX[tier],
      words(hashes, this.req),
      parent !== null,
      parent ?? 0n,
      this.counts,
    );
    return this.result();
  }

  evict(worker: string, tier: Tier, hashes: readonly bigint[] | BigInt64Array): ApplyResult {
    this.idx.remove(this.slot(worker), TIER_INDEX[tier], words(hashes, this.req), this.counts);
    return this.result();
  }

  clear(worker: string): number {
    const s = this.slots.get(worker);
    return s === undefined ? 0 : this.idx.clear(s);
  }

  clearWorker(worker: string): void {
    this.clear(worker);
  }

  overlap(blockHashes: readonly bigint[] | BigInt64Array): OverlapResult {
    const h = words(blockHashes, this.req);
    let n = this.idx.overlapInto(h, this.ov);
    if (n < 0) {
      this.ov = new Int32Array(-n * 2);
      n = this.idx.overlapInto(h, this.ov);
    }
    const o = this.ov;
    const nw = o[0];
    const nr = o[3];
    const workers = new Map<string, WorkerOverlap>();
    for (let s = 0; s < nw; s++) {
      const p = 4 + s * 4;
      const t = 4 + nw * 4 + s * 4;
      if (o[p] + o[p + 1] + o[p + 2] + o[p + 3] + o[t + 1] + o[t + 2] + o[t + 3] === 0) continue;
      workers.set(this.names[s], {
        perTier: { GPU: o[p], CPU_PINNED: o[p + 1], DISK: o[p + 2], EXTERNAL: o[p + 3] },
        tiered: { GPU: o[t], CPU_PINNED: o[t + 1], DISK: o[t + 2], EXTERNAL: o[t + 3] },
      });
    }
    const ranges: [number, number][] = [];
    for (let i = 0; i < nr; i++) ranges.push([o[4 + nw * 8 + 2 * i], o[4 + nw * 8 + 2 * i + 1]]);
    return { requestBlocks: o[1], workers, shared: { ranges, totalHits: o[2] } };
  }

  /**
   * Dynamo's worker scores for a request, computed natively (the same formula as scoreWorkers
   * over overlap(), without building the overlap objects).
   */
  score(
    blockHashes: readonly bigint[] | BigInt64Array,
    candidates: readonly string[],
    blockSize: number,
    loads: Readonly<Record<string, WorkerLoad>> = {},
    config: Partial<ScoringConfig> = {},
  ): WorkerScore[] {
    const nc = candidates.length;
    // The candidate slots' array is exactly nc long (the addon reads nc from it), kept while the
    // count stays the same: a subarray per call would be an allocation per routed request.
    if (this.cand.length !== nc) {
      this.cand = new Uint32Array(nc);
      if (this.scores.length < nc * 6) {
        this.params = new Float64Array(10 + nc * 8);
        this.scores = new Float64Array(nc * 12);
      }
    }
    // Field by field, not a spread of the defaults: this runs once per routed request.
    const d = DEFAULT_SCORING;
    const f = this.params;
    f[0] = blockSize;
    f[1] = config.overlapScoreCredit ?? d.overlapScoreCredit;
    f[2] = config.overlapScoreCreditDecay ?? d.overlapScoreCreditDecay;
    f[3] = config.prefillLoadScale ?? d.prefillLoadScale;
    f[4] = config.hostCacheHitWeight ?? d.hostCacheHitWeight;
    f[5] = config.diskCacheHitWeight ?? d.diskCacheHitWeight;
    f[6] = config.sharedCacheMultiplier ?? d.sharedCacheMultiplier;
    f[7] = config.decodeActiveRequestWeight ?? d.decodeActiveRequestWeight;
    f[8] = (config.trackPrefillTokens ?? d.trackPrefillTokens) ? 1 : 0;
    f[9] = (config.externalAsDisk ?? d.externalAsDisk) ? 1 : 0;
    for (let k = 0; k < nc; k++) {
      this.cand[k] = this.slots.get(candidates[k]) ?? 0xffffffff;
      const l = loads[candidates[k]];
      const o = 10 + 4 * k;
      f[o] = l?.activePrefillTokens ?? 0;
      f[o + 1] = l?.decodeBlocks ?? 0;
      f[o + 2] = l?.activeRequests ?? 0;
      f[o + 3] = l?.decodeOnly ? 1 : 0;
    }
    this.idx.scoreInto(words(blockHashes, this.req), this.cand, f, this.scores);
    const out: WorkerScore[] = new Array(nc);
    const s = this.scores;
    for (let k = 0; k < nc; k++) {
      const o = 6 * k;
      out[k] = {
        worker: candidates[k],
        logit: s[o],
        credit: s[o + 1],
        device: s[o + 2],
        host: s[o + 3],
        disk: s[o + 4],
        sharedBeyond: s[o + 5],
      };
    }
    return out;
  }

  lookup(hash: bigint): BlockInfo | undefined {
    const r = this.idx.lookup(BigInt.asIntN(64, hash));
    if (r === null) return undefined;
    const residency = new Map<string, Tier[]>();
    r.masks.forEach((m, s) => {
      if (m)
        residency.set(
          this.names[s],
          TIERS.filter((_, i) => m & (1 << i)),
        );
    });
    return { hash: r.hash, parent: r.parent, tokenHash: r.tokenHash, residency };
  }

  workers(): string[] {
    return [...this.names];
  }

  /** Blocks per tier and refused input per kind, for one worker. */
  counters(worker: string): WorkerCounters {
    const s = this.slots.get(worker);
    const w = this.ws;
    if (s === undefined) w.fill(0);
    else this.idx.workerStats(s, w);
    const badEvents: Record<string, number> = {};
    BAD_EVENT_KINDS.forEach((k, i) => {
      badEvents[k] = w[WORKER_BAD_EVENTS_AT + i];
    });
    const badBatches: Record<string, number> = {};
    BATCH_ERRORS.forEach((k, i) => {
      if (i > 0) badBatches[k] = w[WORKER_BAD_BATCHES_AT + i];
    });
    return {
      tiers: {
        GPU: w[TIER_INDEX.GPU],
        CPU_PINNED: w[TIER_INDEX.CPU_PINNED],
        DISK: w[TIER_INDEX.DISK],
        EXTERNAL: w[TIER_INDEX.EXTERNAL],
      },
      badEvents,
      badBatches,
      unknownRemovals: w[WORKER_COUNTER.unknownRemovals],
      orphanStores: w[WORKER_COUNTER.orphanStores],
      hashMismatches: w[WORKER_COUNTER.hashMismatches],
      unverifiable: w[WORKER_COUNTER.unverifiable],
      verified: w[WORKER_COUNTER.verified],
    };
  }

  /** Blocks held, by any worker in any tier (`stats().blocks` without every worker's counters). */
  blocks(): number {
    return this.idx.blocks();
  }

  stats(): IndexStats {
    const workers: Record<string, TierCounts> = {};
    let mismatches = 0;
    for (const name of this.names) {
      const c = this.counters(name);
      workers[name] = c.tiers;
      mismatches += c.hashMismatches;
    }
    return {
      blocks: this.blocks(),
      workers,
      hashMismatches: mismatches,
      memoryBytes: this.idx.memoryBytes(),
    };
  }
}
