// Seeded randomness for tests: the same pools and page lists on every run (xorshift32).
export function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => ((x ^= x << 13), (x ^= x >>> 17), (x ^= x << 5), x >>> 0);
}

/** 0..n-1 in a seeded random order (Fisher-Yates). */
export function shuffled(n: number, next: () => number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = next() % (i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Seeded uniform numbers in [0, 1). */
export function uniform(seed: number): () => number {
  const next = rng(seed);
  return () => next() / 2 ** 32;
}
