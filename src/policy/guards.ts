// Guards on what the policies send: a token bucket per worker (a thundering herd of sessions
// cannot flood one worker's control plane) and coalescing (the same command to the same target
// within a short window is sent once). Releases (unpin, RevokeLease, ToolEnd, purges) are never
// dropped, since dropping them would leak what they release; they still use the bucket.
export type GuardVerdict = "send" | "rate_limited" | "coalesced";

export interface GuardOptions {
  commandsPerSecond: number;
  burst: number;
  coalesceMs: number;
}

export class CommandGuards {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly recent = new Map<string, number>();

  constructor(private readonly o: GuardOptions) {}

  check(worker: string, key: string | null, essential: boolean, now: number): GuardVerdict {
    if (key !== null && this.o.coalesceMs > 0) {
      const last = this.recent.get(key);
      if (last !== undefined && now - last < this.o.coalesceMs && !essential) return "coalesced";
    }
    let b = this.buckets.get(worker);
    if (!b) {
      b = { tokens: this.o.burst, at: now };
      this.buckets.set(worker, b);
    }
    b.tokens = Math.min(this.o.burst, b.tokens + ((now - b.at) / 1000) * this.o.commandsPerSecond);
    b.at = now;
    if (b.tokens < 1 && !essential) return "rate_limited";
    b.tokens -= 1;
    if (key !== null) {
      this.recent.set(key, now);
      if (this.recent.size > 100_000) this.prune(now);
    }
    return "send";
  }

  private prune(now: number): void {
    for (const [k, t] of this.recent) if (now - t >= this.o.coalesceMs) this.recent.delete(k);
  }
}
