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
    const v = this.verdict(worker, key, essential, now, []);
    if (v !== "coalesced") this.take(worker, key, now, v === "send");
    return v;
  }

  /** What check would say now, after `pending` (commands passed but not yet taken) went out. Changes nothing. */
  verdict(
    worker: string,
    key: string | null,
    essential: boolean,
    now: number,
    pending: readonly { worker: string; key: string | null }[],
  ): GuardVerdict {
    if (key !== null && this.o.coalesceMs > 0 && !essential) {
      const last = this.recent.get(key);
      if (
        (last !== undefined && now - last < this.o.coalesceMs) ||
        pending.some((p) => p.key === key)
      )
        return "coalesced";
    }
    const b = this.buckets.get(worker);
    let tokens = b
      ? Math.min(this.o.burst, b.tokens + ((now - b.at) / 1000) * this.o.commandsPerSecond)
      : this.o.burst;
    for (const p of pending) if (p.worker === worker) tokens = Math.min(this.o.burst, tokens) - 1;
    return tokens < 1 && !essential ? "rate_limited" : "send";
  }

  /** Refills the worker's bucket to now and, for a command sent, takes its token and remembers its key. */
  take(worker: string, key: string | null, now: number, sent: boolean): void {
    let b = this.buckets.get(worker);
    if (!b) {
      b = { tokens: this.o.burst, at: now };
      this.buckets.set(worker, b);
    }
    b.tokens = Math.min(this.o.burst, b.tokens + ((now - b.at) / 1000) * this.o.commandsPerSecond);
    b.at = now;
    if (!sent) return;
    b.tokens -= 1;
    if (key !== null) {
      this.recent.set(key, now);
      if (this.recent.size > 100_000) this.prune(now);
    }
  }

  private prune(now: number): void {
    for (const [k, t] of this.recent) if (now - t >= this.o.coalesceMs) this.recent.delete(k);
  }
}
