// The oracle: Belady's optimal replacement (with bypass) over the fleet's whole KV capacity, every
// worker's device and host pages pooled into one cache, on a configuration's own request order.
// It is a lower bound on what any configuration can recompute on that order:
//   - a page a worker serves from cache is in the pooled cache's contents too, which never hold
//     more distinct pages than the workers' device + host pages together;
//   - every page of a prompt counts as a hit if the pooled cache holds it, even past a miss
//     (a prefix cache stops there);
//   - a request's pages (prompt and output) enter the cache at its admission, before any request
//     admitted later, and nothing is held for requests in flight.
// Page ids are dense (page-ids.ts) so the replay runs over typed arrays.
import type { RequestRecord } from "./engine.js";

/** A max-heap of (next use, page) with stale entries skipped by the caller. */
class MaxHeap {
  private keys: Float64Array = new Float64Array(1024);
  private vals: Int32Array = new Int32Array(1024);
  size = 0;

  push(key: number, val: number): void {
    if (this.size === this.keys.length) {
      const k = new Float64Array(this.size * 2);
      k.set(this.keys);
      const v = new Int32Array(this.size * 2);
      v.set(this.vals);
      this.keys = k;
      this.vals = v;
    }
    let i = this.size++;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (this.keys[up] >= key) break;
      this.keys[i] = this.keys[up];
      this.vals[i] = this.vals[up];
      i = up;
    }
    this.keys[i] = key;
    this.vals[i] = val;
  }

  topKey(): number {
    return this.keys[0];
  }

  topVal(): number {
    return this.vals[0];
  }

  pop(): void {
    const key = this.keys[--this.size];
    const val = this.vals[this.size];
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= this.size) break;
      if (c + 1 < this.size && this.keys[c + 1] > this.keys[c]) c++;
      if (this.keys[c] <= key) break;
      this.keys[i] = this.keys[c];
      this.vals[i] = this.vals[c];
      i = c;
    }
    this.keys[i] = key;
    this.vals[i] = val;
  }
}

export interface OracleInput {
  /** The request's pages (ids), prompt first. */
  pages: Int32Array;
  /** How many of them the prompt can be served from (SGLang matches at most its length - 1). */
  access: number;
}

/** For each request, in the order given, how many of its first `access` pages Belady hits. */
export function beladyHits(reqs: readonly OracleInput[], capacityPages: number, ids: number) {
  let total = 0;
  for (const r of reqs) total += r.pages.length;
  const seq = new Int32Array(total);
  let at = 0;
  for (const r of reqs) {
    seq.set(r.pages, at);
    at += r.pages.length;
  }
  const next = new Float64Array(total);
  const last = new Float64Array(ids).fill(Infinity);
  for (let i = total - 1; i >= 0; i--) {
    next[i] = last[seq[i]];
    last[seq[i]] = i;
  }
  // held[id]: the next use of a page the cache holds, or -1.
  const held = new Float64Array(ids).fill(-1);
  const heap = new MaxHeap();
  let used = 0;
  const hits = new Int32Array(reqs.length);
  let pos = 0;
  reqs.forEach((r, k) => {
    for (let j = 0; j < r.pages.length; j++, pos++) {
      const id = seq[pos];
      const nu = next[pos];
      if (held[id] >= 0) {
        if (j < r.access) hits[k]++;
        held[id] = nu;
        heap.push(nu, id);
        continue;
      }
      if (nu === Infinity || capacityPages <= 0) continue;
      if (used >= capacityPages) {
        while (held[heap.topVal()] !== heap.topKey()) heap.pop();
        if (heap.topKey() <= nu) continue;
        held[heap.topVal()] = -1;
        heap.pop();
        used--;
      }
      held[id] = nu;
      heap.push(nu, id);
      used++;
    }
  });
  return hits;
}

/** A configuration's requests as the oracle replays them: in the order their workers admitted
 * them (then by request id), the tokens each would recompute under Belady. */
export function oracleCached(
  records: readonly RequestRecord[],
  pageSize: number,
  capacityPages: number,
  ids: number,
): Map<RequestRecord, number> {
  const done = records.filter((r) => r.pages !== null && r.admitted !== null);
  done.sort(
    (a, b) =>
      (a.admitted as number) - (b.admitted as number) ||
      (a.program < b.program ? -1 : a.program > b.program ? 1 : a.n - b.n),
  );
  const inputs = done.map((r) => ({
    pages: r.pages as Int32Array,
    access: Math.floor((r.promptTokens - 1) / pageSize),
  }));
  const hits = beladyHits(inputs, capacityPages, ids);
  return new Map(done.map((r, i) => [r, hits[i] * pageSize]));
}
