// The one mapping from a workload's segments to token ids. A segment is `(seed, len)`; its j-th
// token is a pure function of `(seed, j)` below the model's vocabulary, so two segments with the
// same seed share their first min(len) tokens and any two different seeds part at their first
// token but by chance (1/vocab per token). The mix keeps the seed's full 53 bits apart (two 32-bit
// lanes, each through a bijective finalizer), so no two seeds can share a whole sequence.
import type { Segment } from "../types.js";

/** Largest vocabulary the mapping serves (the reduction multiplies a 32-bit word by it exactly). */
export const MAX_VOCAB = 1 << 21;

const TWO_32 = 4294967296;
const INV_TWO_32 = 1 / TWO_32;
const GOLDEN = 0x9e3779b1;

/** MurmurHash3's 32-bit finalizer: a bijection on 32-bit words with full avalanche. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The two 32-bit lanes of a seed: a bijection of its 53 bits (low word, then high word). */
function lanes(seed: number): [number, number] {
  const lo = seed >>> 0;
  const hi = Math.floor(seed / TWO_32) >>> 0;
  const a = fmix32(lo ^ 0x2545f491);
  const b = fmix32((hi ^ a ^ 0x6a09e667) >>> 0);
  return [a, b];
}

function checkVocab(vocab: number): void {
  if (!Number.isInteger(vocab) || vocab < 2 || vocab > MAX_VOCAB)
    throw new RangeError(`vocab: expected an integer in [2, ${MAX_VOCAB}], got ${vocab}`);
}

function checkSeed(seed: number): void {
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new RangeError(`seed: expected a non-negative integer below 2^53, got ${seed}`);
}

/** The j-th token (from 0) of the segment seeded `seed`, in [0, vocab). */
export function tokenOf(seed: number, j: number, vocab: number): number {
  checkSeed(seed);
  checkVocab(vocab);
  if (!Number.isInteger(j) || j < 0 || j >= TWO_32)
    throw new RangeError(`j: expected an integer in [0, 2^32), got ${j}`);
  const [a, b] = lanes(seed);
  const x = fmix32((a ^ Math.imul(j, GOLDEN)) >>> 0);
  return (fmix32((b ^ x) >>> 0) * vocab * INV_TWO_32) | 0;
}

/** Checks a segment's shape (and, with real ids, that every id is below `vocab`). */
export function checkSegment(seg: Segment, vocab: number): void {
  checkSeed(seg.seed);
  if (!Number.isInteger(seg.len) || seg.len < 1)
    throw new RangeError(`len: expected an integer >= 1, got ${seg.len}`);
  if (seg.ids === undefined) return;
  if (seg.ids.length !== seg.len)
    throw new RangeError(`ids: ${seg.ids.length} ids for len ${seg.len}`);
  for (const id of seg.ids)
    if (!Number.isInteger(id) || id < 0 || id >= vocab)
      throw new RangeError(`ids: ${id} is not a token id below vocab ${vocab}`);
}

/**
 * Writes the segment's tokens into `out` from `at` on and returns the offset after them. The hot
 * path of the engine (every prompt is materialized this way): one pass, no allocation.
 */
export function fillSegment(seg: Segment, vocab: number, out: Int32Array, at: number): number {
  checkVocab(vocab);
  checkSegment(seg, vocab);
  if (!Number.isInteger(at) || at < 0 || at + seg.len > out.length)
    throw new RangeError(`fillSegment: ${seg.len} tokens at ${at} overrun ${out.length}`);
  if (seg.ids !== undefined) {
    for (let j = 0; j < seg.len; j++) out[at + j] = seg.ids[j];
    return at + seg.len;
  }
  const [a, b] = lanes(seg.seed);
  for (let j = 0; j < seg.len; j++) {
    let x = (a ^ Math.imul(j, GOLDEN)) >>> 0;
    x ^= x >>> 16;
    x = Math.imul(x, 0x85ebca6b);
    x ^= x >>> 13;
    x = Math.imul(x, 0xc2b2ae35);
    x ^= x >>> 16;
    let y = (b ^ x) >>> 0;
    y ^= y >>> 16;
    y = Math.imul(y, 0x85ebca6b);
    y ^= y >>> 13;
    y = Math.imul(y, 0xc2b2ae35);
    y ^= y >>> 16;
    // y * vocab < 2^53 is exact, and the quotient is below 2^21: truncation is the floor.
    out[at + j] = ((y >>> 0) * vocab * INV_TWO_32) | 0;
  }
  return at + seg.len;
}

/** Tokens of a run of segments (a prompt, an output). */
export function segmentsLength(segs: readonly Segment[]): number {
  let n = 0;
  for (const s of segs) n += s.len;
  return n;
}

/** The token ids of a run of segments, in order, in one new array. */
export function materialize(segs: readonly Segment[], vocab: number): Int32Array {
  const out = new Int32Array(segmentsLength(segs));
  let at = 0;
  for (const s of segs) at = fillSegment(s, vocab, out, at);
  return out;
}
