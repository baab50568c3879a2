// Mooncake `hash_ids` of a workload's prompts: one id per block of `blockSize` tokens (the last
// block may be partial), equal ids for equal blocks after equal prefixes, numbered from 0 in order
// of first appearance (as Mooncake's traces are). A block is named by what its tokens are made of
// (each segment's seed and the range of it inside the block) and by the block before it, so equal
// content gets equal ids without materializing a token.
import type { Segment } from "../../types.js";

/** The piece of `seg` in tokens [from, to) of the segment, written into a block's name. */
const piece = (seg: Segment, from: number, to: number) => `${seg.seed}:${from}:${to}`;

/**
 * Appends to `ids` (the ids of the prompt's blocks before `ids.length`) the ids of its remaining
 * blocks, each named as above after its parent block's id.
 */
function nameBlocks(
  segs: readonly Segment[],
  blockSize: number,
  ids: number[],
  idOf: (name: string) => number,
): number[] {
  let total = 0;
  for (const s of segs) total += s.len;
  let seg = 0;
  let segStart = 0;
  for (let b = ids.length; b * blockSize < total; b++) {
    const lo = b * blockSize;
    const hi = Math.min(lo + blockSize, total);
    while (segStart + segs[seg].len <= lo) segStart += segs[seg++].len;
    let name = `${b === 0 ? -1 : ids[b - 1]}|`;
    for (let k = seg, at = segStart; at < hi; at += segs[k++].len)
      name += `${piece(segs[k], Math.max(lo, at) - at, Math.min(hi, at + segs[k].len) - at)};`;
    ids.push(idOf(name));
  }
  return ids;
}

/** Numbers blocks across a whole workload; one instance per file. */
export class BlockIds {
  private readonly ids = new Map<string, number>();
  private readonly names: string[] = [];

  constructor(readonly blockSize: number) {}

  /** The id of a block name, a new one (the next number) when unseen. */
  private idOf = (name: string): number => {
    let id = this.ids.get(name);
    if (id === undefined) {
      id = this.names.length;
      this.ids.set(name, id);
      this.names.push(name);
    }
    return id;
  };

  /**
   * The hash ids of a prompt. `prev` (the same program's previous prompt and its ids) lets the
   * blocks that prompt already named be reused: a session's prompts grow by appending.
   */
  of(
    segs: readonly Segment[],
    prev?: { segs: readonly Segment[]; ids: readonly number[] },
  ): number[] {
    let shared = 0;
    let tokens = 0;
    if (prev)
      while (
        shared < segs.length &&
        shared < prev.segs.length &&
        sameSegment(segs[shared], prev.segs[shared])
      )
        tokens += segs[shared++].len;
    const full = Math.min(Math.floor(tokens / this.blockSize), prev?.ids.length ?? 0);
    return nameBlocks(segs, this.blockSize, prev ? prev.ids.slice(0, full) : [], this.idOf);
  }

  /** How many distinct blocks have been named. */
  get size(): number {
    return this.names.length;
  }
}

function sameSegment(a: Segment, b: Segment): boolean {
  return a === b || (a.seed === b.seed && a.len === b.len && a.ids === b.ids);
}
