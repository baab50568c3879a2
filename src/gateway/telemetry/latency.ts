// The latency histograms of one worker call: time to the first answer chunk, the gaps between
// chunks (one token each under SGLang's default stream interval) and end to end, by route, worker
// and tenant. The series are looked up once per call and kept, so a chunk costs one observe.
import type { HistogramSeries } from "./hot-metrics.js";
import type { OpsMetrics } from "./ops-metrics.js";

type Series = HistogramSeries<"route" | "worker" | "tenant">;

interface CallSeries {
  ttft: Series;
  gap: Series;
  e2e: Series;
}

export class LatencyRecorder {
  private readonly series = new Map<string, CallSeries>();
  constructor(private readonly m: OpsMetrics) {}

  /** The clock of one call that started (the request was received) at `startedAt` (performance.now()). */
  start(route: string, worker: string, tenant: string, startedAt: number): CallClock {
    const key = `${route}\0${worker}\0${tenant}`;
    let s = this.series.get(key);
    if (!s) {
      const labels = { route, worker, tenant };
      s = {
        ttft: this.m.ttft.labels(labels),
        gap: this.m.tokenGap.labels(labels),
        e2e: this.m.e2e.labels(labels),
      };
      this.series.set(key, s);
    }
    return new CallClock(s, startedAt);
  }
}

export class CallClock {
  private last = -1;
  constructor(
    private readonly s: CallSeries,
    private readonly startedAt: number,
  ) {}

  /** One streamed chunk went to the client. */
  chunk(): void {
    const now = performance.now();
    if (this.last < 0) this.s.ttft.observe((now - this.startedAt) / 1000);
    else this.s.gap.observe((now - this.last) / 1000);
    this.last = now;
  }

  /** The answer ended. */
  end(): void {
    this.s.e2e.observe((performance.now() - this.startedAt) / 1000);
  }
}
