// Choosing a worker for a request, in the order sgl-model-gateway's cache-aware policy uses, on
// this package's tier-aware index and Dynamo-style scorer:
//   1. only workers that take traffic (healthy, not drained) are candidates;
//   2. load imbalance (max - min in flight > abs threshold AND max > min * rel threshold) wins
//      outright: the least-loaded worker;
//   3. a session's worker, while its affinity is live (TTL since its last turn) - soft: 2 beats it,
//      a drained worker loses its sessions, and with `sessionYieldsWhenFull` so does a worker whose
//      device pool cannot hold the turn beside the prompts in flight there (it goes on to 4);
//   4. with the prompt's block hashes: when the best match rate over the workers exceeds the cache
//      threshold, the lowest Dynamo logit (overlap per tier, shared-cache credit, prefill load);
//   5. otherwise the least-loaded worker (ties at random).
// Pure: time and randomness come in as arguments.
import {
  type OverlapResult,
  scoreWorkers,
  type ScoringConfig,
  selectWorker,
  type TierCounts,
  type WorkerLoad,
  zeroTiers,
} from "../../index/index.js";

/** What the router reads of a worker's prompts in flight. */
export interface InFlightKvView {
  /** Prompt tokens of the calls counted in, each whole (a shared block once per call). */
  readonly promptTokens: number;
  /**
   * Device tokens the prompts in flight hold with this prompt beside them: each block once, the
   * prompt's blocks not already among theirs, every call's tokens past its last full block (or
   * its whole prompt when it was not hashed), and the answers expected of them and of this one.
   */
  tokensWith(blocks: ArrayLike<bigint> | null, tokens: number, pageSize: number): number;
}

/** A worker's in-flight KV as the calls on it count themselves in (in-flight-kv.ts). */
export interface InFlightKvCounter extends InFlightKvView {
  /** An answer ended on the worker with this many tokens (what a call is expected to add). */
  answered(tokens: number): void;
  /** Counts a prompt in; the function returned counts the same prompt out (once). */
  enter(blocks: ArrayLike<bigint> | null, tokens: number, pageSize: number): () => void;
}

export interface WorkerState {
  id: string;
  inFlight: number;
  /** Prompt tokens of the requests in flight on it (prefill load for the scorer). */
  inFlightPromptTokens: number;
  /** Its event stream has a gap not yet replayed: its index view is not trusted. */
  stale: boolean;
  pageSize: number;
  /** Its device KV pool in tokens (SGLang's max_total_num_tokens), when known. */
  deviceTokens?: number;
  /** The device KV of this gateway's prompts in flight on it, shared blocks once. */
  inFlightKv?: InFlightKvView;
}

export interface RouteRequest {
  workers: readonly WorkerState[];
  /** Overlap of the prompt's blocks per worker (null when the prompt was not hashed). */
  overlap: OverlapResult | null;
  session: { worker: string | null; lastActivityMs: number } | null;
  nowMs: number;
  /** The prompt's tokens and its block hashes in a worker's scheme (null: not hashed there). */
  prompt?: { tokens: number; blocksOn(worker: string): ArrayLike<bigint> | null };
}

export interface RoutingOptions {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  sessionAffinityTtlSeconds: number;
  /** A session's turn goes where the cache scoring sends it, instead of to its worker, when that
   * worker's device pool cannot hold it beside the prompts in flight there (cannotTakeNow). */
  sessionYieldsWhenFull?: boolean;
  scoring: Partial<ScoringConfig>;
}

export type RouteReason = "balance" | "session" | "cache" | "load" | "only";

export interface RouteDecision {
  worker: string;
  reason: RouteReason;
  /** The chosen worker's overlap per tier (tier-exclusive), when the prompt was hashed. */
  overlap: TierCounts | null;
  /** Best matched blocks / request blocks over all candidates. */
  matchRate: number | null;
  /** A session whose worker was not a candidate any more (drained or gone). */
  sessionMoved: boolean;
}

export class NoWorkerError extends Error {
  override name = "NoWorkerError";
}

function leastLoaded(ws: readonly WorkerState[], rand: () => number): WorkerState {
  let min = Infinity;
  for (const w of ws) min = Math.min(min, w.inFlight);
  const ties = ws.filter((w) => w.inFlight === min);
  return ties[Math.floor(rand() * ties.length) % ties.length];
}

export function routeRequest(
  req: RouteRequest,
  o: RoutingOptions,
  rand: () => number = Math.random,
): RouteDecision {
  const ws = req.workers;
  if (ws.length === 0)
    throw new NoWorkerError("no worker is taking traffic (all drained or none configured)");
  const overlapOf = (id: string): TierCounts | null => {
    if (!req.overlap) return null;
    const w = ws.find((x) => x.id === id);
    if (w?.stale) return zeroTiers();
    return req.overlap.workers.get(id)?.tiered ?? zeroTiers();
  };
  const affine = req.session?.worker ?? null;
  const sessionMoved = affine !== null && !ws.some((w) => w.id === affine);
  const decide = (
    w: WorkerState,
    reason: RouteReason,
    matchRate: number | null = null,
  ): RouteDecision => ({
    worker: w.id,
    reason: ws.length === 1 ? "only" : reason,
    overlap: overlapOf(w.id),
    matchRate,
    sessionMoved,
  });
  if (ws.length === 1) return decide(ws[0], "only");
  if (imbalanced(ws, o)) return decide(leastLoaded(ws, rand), "balance");
  if (
    req.session &&
    affine !== null &&
    !sessionMoved &&
    req.nowMs - req.session.lastActivityMs <= o.sessionAffinityTtlSeconds * 1000
  ) {
    const w = ws.find((x) => x.id === affine) as WorkerState;
    if (!(o.sessionYieldsWhenFull && cannotTakeNow(w, req))) return decide(w, "session");
  }
  const ov = req.overlap;
  if (ov && ov.requestBlocks > 0) {
    const { pick, matchRate } = byCache(ov, ws, o, rand);
    if (pick) return decide(pick, "cache", matchRate);
    return decide(leastLoaded(ws, rand), "load", matchRate);
  }
  return decide(leastLoaded(ws, rand), "load");
}

/**
 * The session's worker cannot run this turn beside what it runs now: the device KV the prompts in
 * flight there hold (a block they share once) and this turn's blocks not among them exceed its
 * device pool, so the turn would wait in its queue for a request there to end (seconds to minutes
 * at long contexts) while another worker could prefill it now. A prefix the turn shares with a
 * request in flight there (its tenant's system prompt) is held once on the device: it takes no room.
 */
function cannotTakeNow(w: WorkerState, req: RouteRequest): boolean {
  if (w.deviceTokens === undefined || w.inFlight === 0) return false;
  const tokens = req.prompt?.tokens || (req.overlap?.requestBlocks ?? 0) * w.pageSize;
  const kv = w.inFlightKv;
  if (!kv) return w.inFlightPromptTokens + tokens > w.deviceTokens;
  // Prompts there that this gateway did not count in (another replica's, as the worker reports
  // them) are counted whole.
  const others = Math.max(0, w.inFlightPromptTokens - kv.promptTokens);
  const blocks = req.prompt?.blocksOn(w.id) ?? null;
  return others + kv.tokensWith(blocks, tokens, w.pageSize) > w.deviceTokens;
}

/** The load spread is past both balance thresholds: the least loaded worker wins outright. */
function imbalanced(ws: readonly WorkerState[], o: RoutingOptions): boolean {
  let max = -Infinity;
  let min = Infinity;
  for (const w of ws) {
    max = Math.max(max, w.inFlight);
    min = Math.min(min, w.inFlight);
  }
  return max - min > o.balanceAbsThreshold && max > min * o.balanceRelThreshold;
}

/** The best match rate over the trusted workers, and the worker the cache scoring picks when it is past the threshold. */
function byCache(
  ov: OverlapResult,
  ws: readonly WorkerState[],
  o: RoutingOptions,
  rand: () => number,
): { pick: WorkerState | null; matchRate: number } {
  const trusted = ws.filter((w) => !w.stale);
  let best = 0;
  for (const w of trusted) {
    const t = ov.workers.get(w.id)?.tiered;
    if (t) best = Math.max(best, t.GPU + t.CPU_PINNED + t.DISK + t.EXTERNAL);
  }
  const matchRate = best / ov.requestBlocks;
  if (matchRate <= o.cacheThreshold) return { pick: null, matchRate };
  const loads: Record<string, WorkerLoad> = {};
  for (const w of ws)
    loads[w.id] = { activePrefillTokens: w.inFlightPromptTokens, activeRequests: w.inFlight };
  const pageSize = ws[0].pageSize;
  // A stale worker's overlap is not trusted: it is scored as holding nothing.
  const masked: OverlapResult = {
    ...ov,
    workers: new Map([...ov.workers].filter(([id]) => trusted.some((w) => w.id === id))),
  };
  const pick = selectWorker(
    scoreWorkers(
      masked,
      ws.map((w) => w.id),
      pageSize,
      loads,
      o.scoring,
    ),
    o.scoring,
    rand,
  );
  return { pick: pick ? (ws.find((w) => w.id === pick.worker) as WorkerState) : null, matchRate };
}
