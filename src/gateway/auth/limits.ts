// A tenant's request rate (token bucket) and requests in flight. Both answer at once: a request
// over either gets 429 with Retry-After, it never waits here.
import type { TenantConfig } from "./config.js";

export class TenantLimits {
  private tokens: number;
  private last: number;
  inFlight = 0;
  private readonly burst: number;

  constructor(
    private readonly t: TenantConfig,
    private readonly now: () => number,
  ) {
    this.burst = t.burst ?? Math.max(1, Math.ceil(t.requestsPerSecond ?? 1));
    this.tokens = this.burst;
    this.last = now();
  }

  /** null when admitted (and counted in flight), else why not and seconds to wait. */
  take(): { reason: "rate_limited" | "too_many_concurrent"; retryAfterS: number } | null {
    const rps = this.t.requestsPerSecond;
    if (this.t.maxConcurrent !== undefined && this.inFlight >= this.t.maxConcurrent)
      return { reason: "too_many_concurrent", retryAfterS: 1 };
    if (rps !== undefined) {
      const now = this.now();
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * rps);
      this.last = now;
      if (this.tokens < 1)
        return {
          reason: "rate_limited",
          retryAfterS: rps > 0 ? Math.max(1, Math.ceil((1 - this.tokens) / rps)) : 60,
        };
      this.tokens -= 1;
    }
    this.inFlight++;
    return null;
  }

  done(): void {
    this.inFlight--;
  }
}
