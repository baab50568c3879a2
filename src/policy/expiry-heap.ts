// A min-heap of (time, item): what the pin budget's expiry takes, the earliest first, instead of
// scanning every hold. Items whose time comes are handed back; ties in any order.
export class ExpiryHeap<T> {
  private readonly times: number[] = [];
  private readonly items: T[] = [];

  get size(): number {
    return this.times.length;
  }

  /** The earliest time held (Infinity when empty). */
  top(): number {
    return this.times.length ? this.times[0] : Number.POSITIVE_INFINITY;
  }

  push(time: number, item: T): void {
    const ts = this.times;
    const xs = this.items;
    let i = ts.length;
    ts.push(time);
    xs.push(item);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (ts[up] <= time) break;
      ts[i] = ts[up];
      xs[i] = xs[up];
      i = up;
    }
    ts[i] = time;
    xs[i] = item;
  }

  /** Takes the earliest item. */
  pop(): T | undefined {
    const ts = this.times;
    const xs = this.items;
    if (!ts.length) return undefined;
    const out = xs[0];
    const time = ts.pop() as number;
    const item = xs.pop() as T;
    const n = ts.length;
    if (!n) return out;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && ts[c + 1] < ts[c]) c++;
      if (ts[c] >= time) break;
      ts[i] = ts[c];
      xs[i] = xs[c];
      i = c;
    }
    ts[i] = time;
    xs[i] = item;
    return out;
  }
}
