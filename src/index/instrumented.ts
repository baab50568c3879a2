// Metrics as a decorator over any KvIndex (llm-d's instrumented_index.go): counts what was
// applied and times queries, without the wrapped index knowing.
import type { KvEvent } from "../events/types.js";
import { columnsToBatch, type EventColumns } from "../events/native.js";
import { addApplyResult, emptyApplyResult, type ApplyResult, type BlockInfo, type IndexStats, type KvIndex, type OverlapResult } from "./types.js";

export interface IndexMetrics {
  eventsApplied: Record<KvEvent["type"], number>;
  blocksAdded: number;
  blocksRemoved: number;
  unknownRemovals: number;
  orphanStores: number;
  hashMismatches: number;
  applyErrors: number;
  queries: number;
  /** Recent query latencies in microseconds (ring of the last `window`). */
  queryLatencyUs: number[];
}

export class InstrumentedKvIndex implements KvIndex {
  readonly metrics: IndexMetrics = {
    eventsApplied: { BlockStored: 0, BlockRemoved: 0, AllBlocksCleared: 0 },
    blocksAdded: 0,
    blocksRemoved: 0,
    unknownRemovals: 0,
    orphanStores: 0,
    hashMismatches: 0,
    applyErrors: 0,
    queries: 0,
    queryLatencyUs: [],
  };
  private ring = 0;

  constructor(
    readonly inner: KvIndex,
    private readonly window = 1024,
  ) {}

  applyEvent(worker: string, event: KvEvent): ApplyResult {
    let r: ApplyResult;
    try {
      r = this.inner.applyEvent(worker, event);
    } catch (e) {
      this.metrics.applyErrors++;
      throw e;
    }
    this.metrics.eventsApplied[event.type]++;
    return this.record(r);
  }

  get needsTokens(): boolean {
    return this.inner.needsTokens ?? !this.inner.applyColumns;
  }

  applyColumns(worker: string, columns: EventColumns): ApplyResult {
    const r = this.inner.applyColumns
      ? this.inner.applyColumns(worker, columns)
      : columnsToBatch(columns).batch.events.reduce((t, e) => addApplyResult(t, this.inner.applyEvent(worker, e)), emptyApplyResult());
    for (let i = 0; i < columns.count; i++) this.metrics.eventsApplied[KINDS[columns.kinds[i]]]++;
    return this.record(r);
  }

  /** Adds what an apply did to the metrics (applyColumns does not count applyErrors). */
  private record(r: ApplyResult): ApplyResult {
    const m = this.metrics;
    m.blocksAdded += r.added;
    m.blocksRemoved += r.removed;
    m.unknownRemovals += r.unknownRemovals;
    m.orphanStores += r.orphanStores;
    m.hashMismatches += r.hashMismatches;
    return r;
  }

  clearWorker(worker: string): void {
    this.inner.clearWorker(worker);
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

const KINDS = ["BlockStored", "BlockRemoved", "AllBlocksCleared"] as const;
