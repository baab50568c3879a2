// One decision per paused program (InferCept's and Continuum's expected-waste rule): when program
// admission parks a session at a tool boundary, what its KV costs in each of three choices, in
// seconds of worker time, from the tool's online gap distribution D:
//   keep resident for a TTL tau: blocks x E[min(D, tau)] x the device exchange rate, plus the
//     re-prefill of its tokens if the tool outlasts tau;
//   park on host under a lease: the host->device restore of its tokens, plus blocks x
//     E[min(D, lease)] x the host exchange rate, plus the re-prefill if the lease runs out first;
//   let go: the re-prefill of its tokens at the measured prefill rate.
// The least waste wins; on a tie the choice that holds less (let go, then park, then keep).
import type { DurationModel } from "./duration-model.js";

export type RetentionAction = "keep" | "park" | "let_go";

export interface RetentionCosts {
  /** The program's context on the worker (its latest prompt). */
  tokens: number;
  pageSize: number;
  /** Measured recompute rate: what a lost context costs to prefill again. */
  prefillTokensPerSecond: number;
  /** Host -> device load rate: what a parked context costs to bring back. */
  restoreTokensPerSecond: number;
  /** Seconds of worker time one device block held for one second is worth. */
  deviceHoldCostPerBlockSecond: number;
  /** The same for a block held on host. */
  hostHoldCostPerBlockSecond: number;
  /** A parked program's lease. */
  leaseSeconds: number;
  /** The keep TTLs considered. */
  taus: readonly number[];
}

export interface RetentionDecision {
  action: RetentionAction;
  /** How long the choice holds: tau (keep), the lease (park), 0 (let go). */
  ttlSeconds: number;
  /** The gap predicted (the median of the longest call's distribution). */
  predictedGapSeconds: number;
  /** Expected waste of each choice (s), the chosen one least. */
  waste: { keep: number; park: number; letGo: number };
}

/** P(D <= t) and E[min(D, t)] for D the longest of the calls (they run in parallel). */
function gapOf(
  model: DurationModel,
  names: readonly (string | null)[],
): { cdf: (t: number) => number; expectedMin: (t: number) => number } {
  const cdf = (t: number) => names.reduce((acc, n) => acc * model.cdf(n, t), 1);
  if (names.length === 1) return { cdf, expectedMin: (t) => model.expectedMin(names[0], t) };
  // E[min(D, t)] = integral of P(D > x) over [0, t] (midpoint rule) for the max of several.
  const expectedMin = (t: number) => {
    const steps = 64;
    let s = 0;
    for (let i = 0; i < steps; i++) s += (1 - cdf(((i + 0.5) * t) / steps)) * (t / steps);
    return s;
  };
  return { cdf, expectedMin };
}

export function decideRetention(
  model: DurationModel,
  tools: readonly (string | null)[],
  c: RetentionCosts,
): RetentionDecision {
  if (
    !(
      c.tokens >= 0 &&
      c.pageSize > 0 &&
      c.prefillTokensPerSecond > 0 &&
      c.restoreTokensPerSecond > 0 &&
      c.taus.length > 0
    )
  ) {
    throw new Error(
      "retention: expected tokens >= 0, pageSize, prefillTokensPerSecond and restoreTokensPerSecond > 0, and at least one tau",
    );
  }
  const names = tools.length ? tools : [null];
  const gap = gapOf(model, names);
  const blocks = Math.ceil(c.tokens / c.pageSize);
  const recompute = c.tokens / c.prefillTokensPerSecond;
  let keep = Number.POSITIVE_INFINITY;
  let tau = 0;
  for (const t of c.taus) {
    const w =
      blocks * gap.expectedMin(t) * c.deviceHoldCostPerBlockSecond + (1 - gap.cdf(t)) * recompute;
    if (w < keep) {
      keep = w;
      tau = t;
    }
  }
  const park =
    c.tokens / c.restoreTokensPerSecond +
    blocks * gap.expectedMin(c.leaseSeconds) * c.hostHoldCostPerBlockSecond +
    (1 - gap.cdf(c.leaseSeconds)) * recompute;
  const letGo = recompute;
  const predictedGapSeconds = Math.max(...names.map((n) => model.median(n)));
  const waste = { keep, park, letGo };
  if (letGo <= park && letGo <= keep)
    return { action: "let_go", ttlSeconds: 0, predictedGapSeconds, waste };
  if (park <= keep)
    return { action: "park", ttlSeconds: c.leaseSeconds, predictedGapSeconds, waste };
  return { action: "keep", ttlSeconds: tau, predictedGapSeconds, waste };
}
