// Dense ids for the pages a run touches (by block hash), shared by every configuration of the run,
// so the oracle replays them over typed arrays.

export class PageIds {
  private readonly ids = new Map<bigint, number>();

  of(hashes: BigInt64Array): Int32Array {
    const out = new Int32Array(hashes.length);
    for (let i = 0; i < hashes.length; i++) {
      let id = this.ids.get(hashes[i]);
      if (id === undefined) {
        id = this.ids.size;
        this.ids.set(hashes[i], id);
      }
      out[i] = id;
    }
    return out;
  }

  get size(): number {
    return this.ids.size;
  }
}
