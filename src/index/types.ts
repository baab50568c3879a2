// One key-level index interface (llm-d kvblock style: lookup / add / evict / clear, plus the
// overlap the scoring needs); it knows no event format. `InMemoryKvIndex` (src/index/native.ts)
// holds the data in native code and also applies whole KV-event frames; `InstrumentedKvIndex`
// adds metrics around any KvIndex without touching it.
import type { BadEvent, DecodedBatch, Tier } from "../events/types.js";

export type { Tier } from "../events/types.js";
export type TierCounts = Record<Tier, number>;

export interface WorkerOverlap {
  /** Per tier on its own: consecutive blocks from the request's start resident in that tier. */
  perTier: TierCounts;
  /**
   * Dynamo's tier-exclusive continuation: `GPU` counts the device prefix, `CPU_PINNED` the blocks
   * that continue it from host memory, then `DISK`, then `EXTERNAL` (no block counted twice).
   */
  tiered: TierCounts;
}

export interface SharedCacheHits {
  /** Sorted half-open ranges [start, end) of request block positions the shared pool holds. */
  ranges: [number, number][];
  totalHits: number;
}

export interface OverlapResult {
  requestBlocks: number;
  workers: Map<string, WorkerOverlap>;
  /** Positions held in the shared tier (EXTERNAL) by any worker. */
  shared: SharedCacheHits;
}

export interface BlockInfo {
  hash: bigint;
  parent: bigint | null;
  /** The hash recomputed from the block's token ids (null when no hasher is configured, or the
   * chain could not be recomputed because the parent's digest is unknown). */
  tokenHash: bigint | null;
  /** Tiers per worker. */
  residency: Map<string, Tier[]>;
}

export interface ApplyResult {
  /** Blocks that became resident in a (worker, tier) they were not in. */
  added: number;
  /** Blocks that left a (worker, tier). */
  removed: number;
  /** Removals of blocks the index did not hold for that worker and tier. */
  unknownRemovals: number;
  /** Stores whose parent the index did not know (inserted anyway, as a new root). */
  orphanStores: number;
  /** Blocks whose token-derived hash differs from the engine's hash. */
  hashMismatches: number;
}

/** What one KV-event frame did to the index (FrameIndex.applyFrame). */
export interface FrameResult extends ApplyResult {
  /** False when the batch as a whole was refused (nothing of it applied); see `error`. */
  ok: boolean;
  error: string | null;
  /** msgpack, shape, too_large or too_many_events. */
  errorKind: string | null;
  ts: number;
  dpRank: number | null;
  events: number;
  storedEvents: number;
  removedEvents: number;
  clearedEvents: number;
  /** Blocks named by the frame's BlockStored / BlockRemoved events. */
  storedBlocks: number;
  removedBlocks: number;
  /** Blocks whose hash was recomputed from their token ids (verification on). */
  verified: number;
  /** BlockStored events that could not be recomputed (parent digest unknown, LoRA, short pages). */
  unverifiable: number;
  /** Events refused (each skipped whole); details in `bad`. */
  badEvents: number;
  bad: BadEvent[];
}

/** Counters per worker: blocks per tier and refused input per kind. */
export interface WorkerCounters {
  tiers: TierCounts;
  /** Refused events by kind (not_an_event, unknown_tag, fields, hash, tokens, block_size, medium). */
  badEvents: Record<string, number>;
  /** Refused batches by kind (msgpack, shape, too_large, too_many_events). */
  badBatches: Record<string, number>;
  unknownRemovals: number;
  orphanStores: number;
  hashMismatches: number;
  unverifiable: number;
  verified: number;
}

export interface IndexStats {
  blocks: number;
  workers: Record<string, TierCounts>;
  hashMismatches: number;
  /** Bytes the index holds (table and dual-key records). */
  memoryBytes?: number;
}

/** The key-level index: blocks named by their engine hash, per worker and tier. */
export interface KvIndex {
  /** Makes `hashes` (a chain: each block's parent is the one before; the first's is `parent`) resident. */
  add(
    worker: string,
    tier: Tier,
    hashes: readonly bigint[] | BigInt64Array,
    parent?: bigint | null,
  ): ApplyResult;
  /** Makes `hashes` non-resident in (worker, tier). */
  evict(worker: string, tier: Tier, hashes: readonly bigint[] | BigInt64Array): ApplyResult;
  /** Forgets everything `worker` held (restart, or AllBlocksCleared); returns the (block, tier) pairs dropped. */
  clear(worker: string): number;
  /** Same as clear (the consumer's restart hook). */
  clearWorker(worker: string): void;
  /** Overlap of a request's block hashes (engine hashes, in order) per worker per tier. */
  overlap(blockHashes: readonly bigint[] | BigInt64Array): OverlapResult;
  lookup(hash: bigint): BlockInfo | undefined;
  workers(): string[];
  stats(): IndexStats;
}

/** An index that applies whole KV-event frames (msgpack payloads) itself, in one call. */
export interface FrameIndex extends KvIndex {
  applyFrame(worker: string, payload: Uint8Array): FrameResult;
  /** applyFrame, and the frame's events (null when it was refused), from the one decode. */
  applyFrameDecoded?(
    worker: string,
    payload: Uint8Array,
  ): { result: FrameResult; batch: DecodedBatch | null };
}

export function zeroTiers(): TierCounts {
  return { GPU: 0, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 };
}

export function emptyApplyResult(): ApplyResult {
  return { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0, hashMismatches: 0 };
}

/** Adds `r`'s counts into `into`; returns `into`. */
export function addApplyResult(into: ApplyResult, r: ApplyResult): ApplyResult {
  into.added += r.added;
  into.removed += r.removed;
  into.unknownRemovals += r.unknownRemovals;
  into.orphanStores += r.orphanStores;
  into.hashMismatches += r.hashMismatches;
  return into;
}
