// One index interface, several implementations (llm-d kvblock style): `InMemoryKvIndex` holds
// the data, `InstrumentedKvIndex` adds metrics around any KvIndex without touching it.
import type { KvEvent, Tier } from "../events/types.js";
import type { EventColumns } from "../events/native.js";

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

export interface IndexStats {
  blocks: number;
  workers: Record<string, TierCounts>;
  hashMismatches: number;
}

export interface KvIndex {
  /** Applies one validated event for `worker`, all of it or (on a thrown error) none of it. */
  applyEvent(worker: string, event: KvEvent): ApplyResult;
  /** True when applyColumns needs the token ids decoded too (a token hasher keeps the dual key). */
  readonly needsTokens?: boolean;
  /** Optional fast path: a natively decoded batch (src/events/native.ts), applied event by event. */
  applyColumns?(worker: string, columns: EventColumns): ApplyResult;
  /** Forgets everything `worker` held (restart, or AllBlocksCleared). */
  clearWorker(worker: string): void;
  /** Overlap of a request's block hashes (engine hashes, in order) per worker per tier. */
  overlap(blockHashes: readonly bigint[] | BigInt64Array): OverlapResult;
  lookup(hash: bigint): BlockInfo | undefined;
  workers(): string[];
  stats(): IndexStats;
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
