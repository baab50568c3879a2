// The engine's virtual clock: one queue of timed callbacks, run in time order (ties in the order
// they were scheduled), so the same inputs always run the same way. The front's timers (program
// admission's holds, prefetch deadlines) are set on it through `timers`, never on the process's.

interface Entry {
  t: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** A timer on the virtual clock (what `timers.setTimeout` returns). */
export interface VirtualTimer {
  cancel(): void;
}

export class VirtualClock {
  /** Seconds since the run began. */
  now = 0;
  private heap: Entry[] = [];
  private seq = 0;

  /** Milliseconds since the run began (what the gateway's objects read as their clock). */
  nowMs(): number {
    return this.now * 1000;
  }

  at(t: number, fn: () => void): VirtualTimer {
    const e: Entry = { t: Math.max(t, this.now), seq: this.seq++, fn, cancelled: false };
    this.push(e);
    return {
      cancel: () => {
        e.cancelled = true;
      },
    };
  }

  /** setTimeout/clearTimeout on this clock, in milliseconds, for the gateway's objects. */
  readonly timers = {
    setTimeout: (fn: () => void, ms: number): VirtualTimer => this.at(this.now + ms / 1000, fn),
    clearTimeout: (h: unknown): void => (h as VirtualTimer | null)?.cancel(),
  };

  /** When the next callback is due (null: none). */
  next(): number | null {
    while (this.heap.length && this.heap[0].cancelled) this.pop();
    return this.heap.length ? this.heap[0].t : null;
  }

  /** Runs the next callback due at or before `t`; false when there is none. */
  runOne(t: number): boolean {
    const due = this.next();
    if (due === null || due > t) return false;
    const e = this.pop() as Entry;
    this.now = Math.max(this.now, e.t);
    e.fn();
    return true;
  }

  private less(a: Entry, b: Entry): boolean {
    return a.t < b.t || (a.t === b.t && a.seq < b.seq);
  }

  private push(e: Entry): void {
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }

  private pop(): Entry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length && last) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l], h[m])) m = l;
        if (r < h.length && this.less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}
