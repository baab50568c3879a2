// A bounded in-flight window: at most `limit` commands awaiting acks, at most `maxQueued` callers
// waiting for a slot. Past that the publisher refuses locally instead of building an unbounded
// backlog behind a slow or dead worker (the worker-side dedupe is no substitute for back-pressure).

export class InFlightWindow {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(
    readonly limit: number,
    readonly maxQueued: number = Number.POSITIVE_INFINITY,
  ) {
    if (!(limit >= 1)) throw new RangeError("in-flight limit must be at least 1");
  }

  get inFlight(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiters.length;
  }

  /** true: a slot is held now; a promise: resolves when one is; false: the queue is full too. */
  tryAcquire(): true | Promise<void> | false {
    if (this.active < this.limit) {
      this.active++;
      return true;
    }
    if (this.waiters.length >= this.maxQueued) return false;
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    // Hand the slot straight to the next waiter: `active` stays the same.
    if (next) next();
    else this.active--;
  }
}
