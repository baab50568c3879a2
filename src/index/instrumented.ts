// Metrics as a decorator over any KvIndex (llm-d's instrumented_index.go): counts what was
// applied and times queries, without the wrapped index knowing.
import { decodeBatch } from "../events/decode.js";
import type { DecodedBatch, KvEvent, Tier } from "../events/types.js";
import type {
  ApplyResult,
  BlockInfo,
  FrameIndex,
  FrameResult,
  IndexStats,
  KvIndex,
  OverlapResult,
} from "./types.js";
import { addApplyResult, emptyApplyResult } from "./types.js";

export interface IndexMetrics {
  eventsApplied: Record<KvEvent["type"], number>;
  readonly blocksAdded: number;
  readonly blocksRemoved: number;
  readonly unknownRemovals: number;
  readonly orphanStores: number;
  readonly hashMismatches: number;
  /** Events and frames refused by the decoder (each skipped whole). */
  badEvents: number;
  badFrames: number;
  queries: number;
  /** Recent query latencies in microseconds (ring of the last `window`). */
  queryLatencyUs: number[];
}

/** The metrics object over `applied`: the apply counts are read from it, not kept twice. */
function metricsOver(applied: ApplyResult): IndexMetrics {
  return {
    eventsApplied: { BlockStored: 0, BlockRemoved: 0, AllBlocksCleared: 0 },
    get blocksAdded() {
      return applied.added;
    },
    get blocksRemoved() {
      return applied.removed;
    },
    get unknownRemovals() {
      return applied.unknownRemovals;
    },
    get orphanStores() {
      return applied.orphanStores;
    },
    get hashMismatches() {
      return applied.hashMismatches;
    },
    badEvents: 0,
    badFrames: 0,
    queries: 0,
    queryLatencyUs: [],
  };
}

export class InstrumentedKvIndex implements FrameIndex {
  /** What every apply added up to (addApplyResult), behind the metrics' block counts. */
  private readonly applied = emptyApplyResult();
  readonly metrics: IndexMetrics = metricsOver(this.applied);
  private ring = 0;

  constructor(
    readonly inner: KvIndex,
    private readonly window = 1024,
  ) {}

  applyFrame(worker: string, payload: Uint8Array): FrameResult {
    const inner = this.inner as Partial<FrameIndex>;
    if (!inner.applyFrame) throw new Error("the wrapped index does not apply frames");
    return this.frame(inner.applyFrame.call(this.inner, worker, payload));
  }

  applyFrameDecoded(
    worker: string,
    payload: Uint8Array,
  ): { result: FrameResult; batch: DecodedBatch | null } {
    const inner = this.inner as Partial<FrameIndex>;
    if (!inner.applyFrameDecoded) {
      // An index that cannot hand its decode back: the events decoded apart.
      const result = this.applyFrame(worker, payload);
      return { result, batch: result.ok ? decodeBatch(payload) : null };
    }
    const r = inner.applyFrameDecoded.call(this.inner, worker, payload);
    this.frame(r.result);
    return r;
  }

  private frame(r: FrameResult): FrameResult {
    const m = this.metrics;
    if (!r.ok) m.badFrames++;
    m.badEvents += r.badEvents;
    m.eventsApplied.BlockStored += r.storedEvents;
    m.eventsApplied.BlockRemoved += r.removedEvents;
    m.eventsApplied.AllBlocksCleared += r.clearedEvents;
    this.record(r);
    return r;
  }

  add(
    worker: string,
    tier: Tier,
    hashes: readonly bigint[] | BigInt64Array,
    parent: bigint | null = null,
  ): ApplyResult {
    this.metrics.eventsApplied.BlockStored++;
    return this.record(this.inner.add(worker, tier, hashes, parent));
  }

  evict(worker: string, tier: Tier, hashes: readonly bigint[] | BigInt64Array): ApplyResult {
    this.metrics.eventsApplied.BlockRemoved++;
    return this.record(this.inner.evict(worker, tier, hashes));
  }

  clear(worker: string): number {
    this.metrics.eventsApplied.AllBlocksCleared++;
    const n = this.inner.clear(worker);
    this.applied.removed += n;
    return n;
  }

  clearWorker(worker: string): void {
    this.inner.clearWorker(worker);
  }

  private record(r: ApplyResult): ApplyResult {
    addApplyResult(this.applied, r);
    return r;
  }

  overlap(blockHashes: readonly bigint[] | BigInt64Array): OverlapResult {
    const t0 = process.hrtime.bigint();
    const r = this.inner.overlap(blockHashes);
    const us = Number(process.hrtime.bigint() - t0) / 1000;
    const lat = this.metrics.queryLatencyUs;
    if (lat.length < this.window) lat.push(us);
    else lat[this.ring++ % this.window] = us;
    this.metrics.queries++;
    return r;
  }

  lookup(hash: bigint): BlockInfo | undefined {
    return this.inner.lookup(hash);
  }

  workers(): string[] {
    return this.inner.workers();
  }

  stats(): IndexStats {
    return this.inner.stats();
  }
}
