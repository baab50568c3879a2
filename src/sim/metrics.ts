// A configuration's figures from its run's request records (types.ts SimConfigResult): the
// metrics that separate policies (shared/design reference, "Metrics that separate policies"),
// read as bench:agent reads its real runs where the two overlap (recomputed = prompt - cached;
// nearest-rank percentiles over returning turns).
import type { CommandCounts } from "./front/types.js";
import type { ConfigRun, RequestRecord } from "./engine.js";
import type { SimConfigResult, SimPercentiles } from "./types.js";

export interface MetricsOptions {
  /** GPUs a worker spans (the profile's tensor parallelism): a prefill second is tp GPU-seconds. */
  tp: number;
  /** Goodput counts programs whose returning-turn TTFT p90 is at most this (ms). */
  ttftTargetMs: number;
}

/** Nearest-rank percentile (p in 0..1) of ascending `xs`; 0 when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

const ms3 = (x: number) => Math.round(x * 1000) / 1000;

function stats(ttftsMs: number[]): SimPercentiles {
  const s = ttftsMs.slice().sort((a, b) => a - b);
  return {
    n: s.length,
    p50_ms: ms3(percentile(s, 0.5)),
    p90_ms: ms3(percentile(s, 0.9)),
    p99_ms: ms3(percentile(s, 0.99)),
  };
}

export const GAP_BUCKETS: readonly [string, number][] = [
  ["<10s", 10],
  ["10s-1m", 60],
  ["1-5m", 300],
  [">5m", Infinity],
];

export const CONTEXT_BUCKETS: readonly [string, number][] = [
  ["<8K", 8192],
  ["8-32K", 32768],
  ["32-64K", 65536],
  [">64K", Infinity],
];

function bucketOf(buckets: readonly [string, number][], x: number): string {
  for (const [name, below] of buckets) if (x < below) return name;
  return buckets[buckets.length - 1][0];
}

const ttftMs = (r: RequestRecord) => ((r.firstToken as number) - r.arrival) * 1000;

function byBucket(
  rs: readonly RequestRecord[],
  buckets: readonly [string, number][],
  key: (r: RequestRecord) => number,
): Record<string, SimPercentiles> {
  const groups = new Map<string, number[]>(buckets.map(([n]) => [n, []]));
  for (const r of rs) groups.get(bucketOf(buckets, key(r)))?.push(ttftMs(r));
  return Object.fromEntries([...groups].map(([k, v]) => [k, stats(v)]));
}

/** The returning-turn TTFT distribution, at most `points` steps of [ms, share at or below]. */
function cdf(ttfts: number[], points = 200): [number, number][] {
  const s = ttfts.slice().sort((a, b) => a - b);
  if (s.length === 0) return [];
  const out: [number, number][] = [];
  const step = Math.max(1, Math.floor(s.length / points));
  for (let i = step - 1; i < s.length; i += step) out.push([ms3(s[i]), ms3((i + 1) / s.length)]);
  if (out[out.length - 1][1] !== 1) out.push([ms3(s[s.length - 1]), 1]);
  return out;
}

/** Agent programs (not floods) whose returning-turn TTFT p90 met the target, per hour. */
function goodput(rs: readonly RequestRecord[], run: ConfigRun, o: MetricsOptions): number {
  const per = new Map<string, number[]>();
  for (const r of rs) {
    if (r.family === "flood" || r.firstToken === null) continue;
    if (!per.has(r.program)) per.set(r.program, []);
    if (r.n > 0) (per.get(r.program) as number[]).push(ttftMs(r));
  }
  let good = 0;
  for (const [program, ttfts] of per) {
    if (!run.programEnds.has(program)) continue;
    const s = ttfts.sort((a, b) => a - b);
    if (percentile(s, 0.9) <= o.ttftTargetMs) good++;
  }
  return run.simulatedS > 0 ? Math.round((good * 3600 * 1000) / run.simulatedS) / 1000 : 0;
}

export function configResult(
  run: ConfigRun,
  commands: Record<string, CommandCounts>,
  o: MetricsOptions,
): SimConfigResult {
  const done = run.records.filter((r) => r.finish !== null && r.firstToken !== null);
  const returning = done.filter((r) => r.n > 0);
  const ttfts = returning.map(ttftMs);
  const overall = stats(ttfts);
  const bytes: Record<string, number> = { h2d: 0, d2h: 0, storage_read: 0, storage_write: 0 };
  let prefill = 0;
  let storageHit = 0;
  for (const w of Object.values(run.workers)) {
    prefill += w.prefill_s;
    storageHit += typeof w.storage_hit_tokens === "number" ? w.storage_hit_tokens : 0;
    for (const [k, v] of Object.entries(w.bytes)) bytes[k] = (bytes[k] ?? 0) + v;
  }
  let recomputed = 0;
  for (const r of done) recomputed += r.promptTokens - r.cached;
  return {
    recomputed_tokens: recomputed,
    prefill_gpu_s: ms3(prefill * o.tp),
    ttft_p50_ms: overall.p50_ms,
    ttft_p90_ms: overall.p90_ms,
    ttft_p99_ms: overall.p99_ms,
    goodput_programs_per_h: goodput(done, run, o),
    ttft_all: stats(done.map(ttftMs)),
    ttft_by_gap: byBucket(returning, GAP_BUCKETS, (r) => r.gapS),
    ttft_by_context: byBucket(returning, CONTEXT_BUCKETS, (r) => r.promptTokens),
    bytes_moved: bytes,
    storage_hit_tokens: storageHit,
    commands: structuredClone(commands),
    ttft_cdf: cdf(ttfts),
    errors: run.records.length - done.length,
  };
}
