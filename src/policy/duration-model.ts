// Online per-tool duration distributions (Continuum-style): each tool name keeps its latest
// samples; until it has enough of them its CDF is exponential with a prior mean (or the mean of
// the few samples it has), then the empirical CDF.
export class DurationModel {
  private readonly samples = new Map<string, number[]>();
  /** Each tool's samples sorted, kept until it records another (cdf counts them by bisection). */
  private readonly sorted = new Map<string, number[]>();

  constructor(
    private readonly o: {
      priorMeanSeconds: number;
      minSamples: number;
      maxSamples: number;
      maxTools: number;
    },
  ) {}

  private key(name: string | null): string {
    const n = name ?? "*";
    return this.samples.has(n) || this.samples.size < this.o.maxTools ? n : "*";
  }

  record(name: string | null, seconds: number): void {
    const k = this.key(name);
    let l = this.samples.get(k);
    if (!l) {
      l = [];
      this.samples.set(k, l);
    }
    l.push(seconds);
    if (l.length > this.o.maxSamples) l.splice(0, l.length - this.o.maxSamples);
    this.sorted.delete(k);
  }

  /** How many of `name`'s samples `l` are at most t. */
  private atMost(name: string, l: readonly number[], t: number): number {
    let s = this.sorted.get(name);
    if (!s) {
      s = l.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b); // NaN is never <= t
      this.sorted.set(name, s);
    }
    let lo = 0;
    let hi = s.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (s[mid] <= t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  count(name: string | null): number {
    return this.samples.get(name ?? "*")?.length ?? 0;
  }

  /** P(duration <= t). */
  cdf(name: string | null, t: number): number {
    const l = this.samples.get(name ?? "*") ?? [];
    if (l.length >= this.o.minSamples) return this.atMost(name ?? "*", l, t) / l.length;
    const mean = l.length ? l.reduce((a, b) => a + b, 0) / l.length : this.o.priorMeanSeconds;
    return 1 - Math.exp(-t / Math.max(mean, 1e-6));
  }

  /** E[min(D, tau)]: how long a hold with TTL tau is held, on average (exact for both forms). */
  expectedMin(name: string | null, tau: number): number {
    const l = this.samples.get(name ?? "*") ?? [];
    if (l.length >= this.o.minSamples)
      return l.reduce((a, x) => a + Math.min(x, tau), 0) / l.length;
    const mean = Math.max(
      l.length ? l.reduce((a, b) => a + b, 0) / l.length : this.o.priorMeanSeconds,
      1e-6,
    );
    return mean * (1 - Math.exp(-tau / mean));
  }

  /** The median (what a prediction is recorded as). */
  median(name: string | null): number {
    const l = this.samples.get(name ?? "*") ?? [];
    if (l.length >= this.o.minSamples) {
      const s = [...l].sort((a, b) => a - b);
      return s[Math.floor(s.length / 2)];
    }
    const mean = l.length ? l.reduce((a, b) => a + b, 0) / l.length : this.o.priorMeanSeconds;
    return mean * Math.LN2;
  }
}

export interface KeepChoice {
  tauSeconds: number;
  /** P(every call returns within tau). */
  p: number;
  benefitSeconds: number;
  costSeconds: number;
  net: number;
}

/**
 * The best keep-resident TTL: argmax over tau of P(D <= tau) * benefit - cost(tau), cost being the
 * blocks held for the expected hold time E[min(D, tau)] at the exchange rate. D is the longest of
 * the calls (they run in parallel; independent).
 */
export function bestKeep(
  model: Pick<DurationModel, "cdf">,
  names: readonly (string | null)[],
  blocks: number,
  benefitSeconds: number,
  taus: readonly number[],
  holdCostPerBlockSecond: number,
): KeepChoice {
  const P = (t: number) => names.reduce((acc, n) => acc * model.cdf(n, t), 1);
  let best: KeepChoice | null = null;
  for (const tau of taus) {
    const p = P(tau);
    // E[min(D, tau)] = integral of P(D > t) over [0, tau] (midpoint rule).
    const steps = 16;
    let hold = 0;
    for (let i = 0; i < steps; i++) hold += (1 - P(((i + 0.5) * tau) / steps)) * (tau / steps);
    const cost = blocks * hold * holdCostPerBlockSecond;
    const c = {
      tauSeconds: tau,
      p,
      benefitSeconds: benefitSeconds,
      costSeconds: cost,
      net: p * benefitSeconds - cost,
    };
    if (!best || c.net > best.net) best = c;
  }
  return best as KeepChoice;
}
