// The sessions as a transaction reads them: the policy's map with the transaction's own changes
// over it. A view it touched (or created) iterates last, as the map orders a session seen again.
import type { SessionView } from "./session-view.js";

export class SessionsDraft implements ReadonlyMap<string, SessionView> {
  /** Views the transaction put (null: dropped). */
  private readonly put_ = new Map<string, SessionView | null>();
  /** Ids it touched, in order. */
  private readonly touched = new Map<string, true>();

  constructor(private readonly live: ReadonlyMap<string, SessionView>) {}

  put(id: string, view: SessionView | null, touch: boolean): void {
    this.put_.set(id, view);
    if (touch || (view !== null && !this.live.has(id) && !this.touched.has(id))) {
      this.touched.delete(id);
      this.touched.set(id, true);
    }
  }

  get(id: string): SessionView | undefined {
    const v = this.put_.get(id);
    return v === undefined ? this.live.get(id) : (v ?? undefined);
  }

  has(id: string): boolean {
    return this.get(id) !== undefined;
  }

  get size(): number {
    let n = this.live.size;
    for (const [id, v] of this.put_) {
      if (v === null && this.live.has(id)) n--;
      else if (v !== null && !this.live.has(id)) n++;
    }
    return n;
  }

  *entries(): MapIterator<[string, SessionView]> {
    // Nothing changed yet: the policy's own map, at its own speed.
    if (!this.put_.size) {
      yield* this.live.entries();
      return;
    }
    for (const id of this.live.keys()) {
      if (this.touched.has(id)) continue;
      const v = this.get(id);
      if (v) yield [id, v];
    }
    for (const id of this.touched.keys()) {
      const v = this.get(id);
      if (v) yield [id, v];
    }
  }

  *keys(): MapIterator<string> {
    for (const [id] of this.entries()) yield id;
  }

  *values(): MapIterator<SessionView> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): MapIterator<[string, SessionView]> {
    return this.entries();
  }

  forEach(f: (v: SessionView, id: string, map: ReadonlyMap<string, SessionView>) => void): void {
    for (const [id, v] of this.entries()) f(v, id, this);
  }
}
