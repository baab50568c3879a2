// Sequence tracking for one publisher: SGLang's ZmqEventPublisher numbers batches 0, 1, 2, ...
// (itertools.count) and starts again at 0 when the worker restarts.

export type SeqVerdict =
  | { kind: "first" }
  | { kind: "next" }
  | { kind: "gap"; expected: bigint; missing: bigint }
  | { kind: "duplicate"; expected: bigint }
  | { kind: "restart"; expected: bigint };

export interface SeqTrackerOptions {
  /**
   * A seq this far or further below the expected one is a restart rather than a duplicate, even
   * if it is not 0 (a publisher that restarted and sent batches we never saw). Default 10_000,
   * SGLang's replay buffer_steps: a duplicate can only come from within that window.
   */
  restartWindow?: bigint;
}

export class SeqTracker {
  /** The seq we expect next; null before the first batch. */
  expected: bigint | null = null;
  private readonly window: bigint;

  constructor(opts: SeqTrackerOptions = {}) {
    this.window = opts.restartWindow ?? 10_000n;
  }

  /** Classifies `seq` without accepting it. */
  classify(seq: bigint): SeqVerdict {
    const e = this.expected;
    if (e === null) return { kind: "first" };
    if (seq === e) return { kind: "next" };
    if (seq > e) return { kind: "gap", expected: e, missing: seq - e };
    if (seq === 0n || e - seq >= this.window) return { kind: "restart", expected: e };
    return { kind: "duplicate", expected: e };
  }

  /** Marks `seq` as consumed: the next expected is seq + 1. */
  accept(seq: bigint): void {
    this.expected = seq + 1n;
  }

  reset(): void {
    this.expected = null;
  }
}
