// The engine's one source of randomness (ties in routing): a seeded generator, so a seed gives
// the same run (mulberry32: 32-bit state, period 2^32, ample for tie-breaking).
export function seededRandom(seed: number): () => number {
  let s = (Math.floor(seed) ^ 0x9e3779b9) >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
