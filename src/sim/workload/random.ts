// Seeded randomness for the workload generators: independent streams keyed by (seed, what, index),
// so a program's draws do not depend on how many programs came before it (a workload of N + 1
// programs holds the first N unchanged), and the distributions the generators cite.

const TWO_32 = 4294967296;

/** MurmurHash3's 32-bit finalizer. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** A 32-bit hash of a string (FNV-1a over UTF-16 code units, then finalized). */
function hashString(s: string, h = 0x811c9dc5): number {
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return fmix32(h >>> 0);
}

/** A 53-bit hash of text: equal text, equal value; distinct texts collide with chance 2^-53. */
export function hash53(s: string): number {
  const a = hashString(s, 0x811c9dc5);
  const b = hashString(s, 0x01234567 ^ a);
  return (a & 0x1fffff) * TWO_32 + b;
}

/** A uniform generator: mulberry32 seeded from its key, one stream per key. */
export class Rng {
  private state: number;

  constructor(seed: number, what: string, index = 0) {
    const lo = seed >>> 0;
    const hi = Math.floor(seed / TWO_32) >>> 0;
    this.state = fmix32(
      hashString(what, fmix32(lo ^ 0x9e3779b9)) ^ fmix32(hi + index * 0x27d4eb2f),
    );
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / TWO_32;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Standard normal (Box-Muller). */
  normal(): number {
    return Math.sqrt(-2 * Math.log(1 - this.next())) * Math.cos(2 * Math.PI * this.next());
  }

  /** Lognormal with this median and log-space sigma. */
  lognormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal());
  }

  /** Log-uniform in [lo, hi]. */
  logUniform(lo: number, hi: number): number {
    return lo * (hi / lo) ** this.next();
  }

  /** Index k in [0, n) with probability proportional to 1 / (k + 1)^s (Zipf). */
  zipf(n: number, s: number): number {
    let total = 0;
    for (let k = 1; k <= n; k++) total += k ** -s;
    let u = this.next() * total;
    for (let k = 1; k <= n; k++) {
      u -= k ** -s;
      if (u < 0) return k - 1;
    }
    return n - 1;
  }
}

/**
 * A distribution given by published percentiles: `[share, value]` pairs with shares ascending from
 * 0 to 1 and values non-decreasing. Sampled by inverse CDF, interpolating log-linearly between two
 * positive values (the tails in these tables span decades) and linearly from or to 0.
 */
export class QuantileTable {
  constructor(readonly points: readonly (readonly [number, number])[]) {
    const ok =
      points.length >= 2 &&
      points[0][0] === 0 &&
      points[points.length - 1][0] === 1 &&
      points.every(
        ([q, v], i) => v >= 0 && (i === 0 || (q > points[i - 1][0] && v >= points[i - 1][1])),
      );
    if (!ok) throw new RangeError(`QuantileTable: bad points ${JSON.stringify(points)}`);
  }

  /** The value at share `u` of the distribution. */
  at(u: number): number {
    const p = this.points;
    let i = 1;
    while (i < p.length - 1 && p[i][0] <= u) i++;
    const [q0, v0] = p[i - 1];
    const [q1, v1] = p[i];
    const f = (u - q0) / (q1 - q0);
    if (v0 > 0 && v1 > 0) return v0 * (v1 / v0) ** f;
    return v0 + (v1 - v0) * f;
  }

  sample(r: Rng): number {
    return this.at(r.next());
  }
}
