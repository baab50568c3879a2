// Exponential backoff with jitter for retries: spreads re-sends from many routers after a worker
// restart instead of having them arrive in lock-step.
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
}

/** Delay before retry number `retry` (1 = first retry): base * 2^(retry-1), capped, jittered 50-100%. */
export function backoffDelay(
  retry: number,
  { baseMs, maxMs }: BackoffOptions,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, retry - 1));
  return Math.round(ceiling * (0.5 + 0.5 * random()));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
