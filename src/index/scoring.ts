// Dynamo's worker selection (lib/kv-router/src/scheduling/selector/default.rs,
// DefaultWorkerScorer::worker_logit), on the overlaps this index computes. Lower logit wins.
//
//   decay   = 1/(1 + overlap_score_credit_decay * ((active_prefill_tokens - min_active_prefill_tokens)/block_size)/request_blocks)
//             (only when track_prefill_tokens and the decay factor > 0)
//   shared  = shared_cache_multiplier * shared.hits_beyond(round(device_overlap))
//   credit  = overlap_score_credit*decay*device + host_cache_hit_weight*host + disk_cache_hit_weight*disk + shared
//   logit   = prefill_load_scale * max(0, raw_prefill_blocks - credit) + decode_blocks + decode_active_request_weight*active_requests
//   (decode-only workers with credit > 0 and !track_prefill_tokens: max(0, decode_blocks - credit) + active_request_cost)
// temperature > 0 samples a softmax over min-max-normalised logits; ties at 0 go to a uniform pick.
import {
  type OverlapResult,
  type SharedCacheHits,
  type WorkerOverlap,
  zeroTiers,
} from "./types.js";

export interface ScoringConfig {
  overlapScoreCredit: number;
  overlapScoreCreditDecay: number;
  prefillLoadScale: number;
  hostCacheHitWeight: number;
  diskCacheHitWeight: number;
  sharedCacheMultiplier: number;
  decodeActiveRequestWeight: number;
  temperature: number;
  trackPrefillTokens: boolean;
  /** Count EXTERNAL-tier continuation blocks as disk (one Dynamo version folds them in). */
  externalAsDisk: boolean;
}

/** Dynamo's defaults (pyo3 KvRouterConfig::new); SGLang's router CLI uses shared 0.5. */
export const DEFAULT_SCORING: ScoringConfig = {
  overlapScoreCredit: 1.0,
  overlapScoreCreditDecay: 0.0,
  prefillLoadScale: 1.0,
  hostCacheHitWeight: 0.75,
  diskCacheHitWeight: 0.25,
  sharedCacheMultiplier: 0.0,
  decodeActiveRequestWeight: 0.0,
  temperature: 0.0,
  trackPrefillTokens: true,
  externalAsDisk: false,
};

export interface WorkerLoad {
  /** Prefill tokens queued or running on the worker. */
  activePrefillTokens?: number;
  /** KV blocks held by running decodes. */
  decodeBlocks?: number;
  activeRequests?: number;
  /** A decode-only worker (disaggregated serving). */
  decodeOnly?: boolean;
}

export interface WorkerScore {
  worker: string;
  logit: number;
  credit: number;
  device: number;
  host: number;
  disk: number;
  sharedBeyond: number;
}

/** Number of shared-pool positions >= n (Dynamo SharedCacheHits::hits_beyond). */
export function hitsBeyond(shared: SharedCacheHits, n: number): number {
  let c = 0;
  for (const [s, e] of shared.ranges) {
    if (e <= n) continue;
    c += e - Math.max(s, n);
  }
  return c;
}

const NONE: WorkerOverlap = { perTier: zeroTiers(), tiered: zeroTiers() };

export function scoreWorkers(
  overlap: OverlapResult,
  candidates: readonly string[],
  blockSize: number,
  loads: Readonly<Record<string, WorkerLoad>> = {},
  config: Partial<ScoringConfig> = {},
): WorkerScore[] {
  const c = { ...DEFAULT_SCORING, ...config };
  const requestBlocks = overlap.requestBlocks;
  let minPrefill = Infinity;
  for (const w of candidates) minPrefill = Math.min(minPrefill, loads[w]?.activePrefillTokens ?? 0);
  if (!Number.isFinite(minPrefill)) minPrefill = 0;
  return candidates.map((worker) => {
    const o = overlap.workers.get(worker) ?? NONE;
    const load = loads[worker] ?? {};
    const active = load.activePrefillTokens ?? 0;
    const device = o.tiered.GPU;
    const host = o.tiered.CPU_PINNED;
    const disk = o.tiered.DISK + (c.externalAsDisk ? o.tiered.EXTERNAL : 0);
    let decay = 1;
    if (c.trackPrefillTokens && c.overlapScoreCreditDecay > 0 && requestBlocks > 0) {
      decay =
        1 / (1 + (c.overlapScoreCreditDecay * ((active - minPrefill) / blockSize)) / requestBlocks);
    }
    const sharedBeyond = hitsBeyond(overlap.shared, Math.round(device));
    const credit =
      c.overlapScoreCredit * decay * device +
      c.hostCacheHitWeight * host +
      c.diskCacheHitWeight * disk +
      c.sharedCacheMultiplier * sharedBeyond;
    const rawPrefill = requestBlocks + (c.trackPrefillTokens ? active / blockSize : 0);
    const decode = load.decodeBlocks ?? 0;
    const reqCost = c.decodeActiveRequestWeight * (load.activeRequests ?? 0);
    const logit =
      load.decodeOnly && credit > 0 && !c.trackPrefillTokens
        ? Math.max(0, decode - credit) + reqCost
        : c.prefillLoadScale * Math.max(0, rawPrefill - credit) + decode + reqCost;
    return { worker, logit, credit, device, host, disk, sharedBeyond };
  });
}

/** Picks a worker: the lowest logit (ties uniformly at random), or a softmax sample when temperature > 0. */
export function selectWorker(
  scores: readonly WorkerScore[],
  config: Partial<ScoringConfig> = {},
  rand: () => number = Math.random,
): WorkerScore | undefined {
  if (scores.length === 0) return undefined;
  const temperature = config.temperature ?? DEFAULT_SCORING.temperature;
  if (temperature > 0) {
    const ls = scores.map((s) => s.logit);
    const lo = Math.min(...ls);
    const hi = Math.max(...ls);
    const norm = ls.map((l) => (hi > lo ? (l - lo) / (hi - lo) : 0));
    const w = norm.map((x) => Math.exp(-x / temperature));
    const sum = w.reduce((a, b) => a + b, 0);
    let r = rand() * sum;
    for (let i = 0; i < scores.length; i++) {
      r -= w[i];
      if (r <= 0) return scores[i];
    }
    return scores[scores.length - 1];
  }
  // One pass for the lowest logit and its ties, a second only to pick among several ties: this
  // runs once per routed request, so it allocates nothing.
  let best = Infinity;
  let ties = 0;
  for (const s of scores) {
    if (s.logit < best) {
      best = s.logit;
      ties = 1;
    } else if (s.logit === best) ties++;
  }
  if (ties === 0) return undefined; // every logit NaN
  let k = Math.floor(rand() * ties) % ties;
  for (const s of scores) if (s.logit === best && k-- === 0) return s;
  return undefined;
}
