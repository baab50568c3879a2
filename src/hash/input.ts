// Token input normalisation: one Uint32Array of tokens plus sequence offsets, checked once.
import { HashInputError, describe } from "./errors.js";

/** Token ids of one sequence: a Uint32Array is used as is, anything else is checked. */
export type Tokens = Uint32Array | ArrayLike<number>;

/** Many sequences: either packed (tokens + offsets, offsets.length = sequences + 1) or a list. */
export type SequenceBatch = { tokens: Uint32Array; offsets: Uint32Array } | ReadonlyArray<Tokens>;

const U32_LIMIT = 2 ** 32;

/** Checks token ids (integers in [0, 2^32)) and returns them as a Uint32Array. */
export function toTokenArray(fn: string, argument: string, tokens: unknown): Uint32Array {
  if (tokens instanceof Uint32Array) return tokens;
  if (
    tokens === null ||
    typeof tokens !== "object" ||
    typeof (tokens as ArrayLike<number>).length !== "number"
  ) {
    throw new HashInputError(
      fn,
      argument,
      `must be a Uint32Array or an array of token ids (got ${describe(tokens)})`,
    );
  }
  const src = tokens as ArrayLike<unknown>;
  const out = new Uint32Array(src.length);
  for (let i = 0; i < src.length; i++) {
    const t = src[i];
    if (typeof t !== "number" || !Number.isInteger(t)) {
      throw new HashInputError(
        fn,
        `${argument}[${i}]`,
        `token id must be an integer (got ${describe(t)})`,
      );
    }
    if (t < 0 || t >= U32_LIMIT) {
      throw new HashInputError(fn, `${argument}[${i}]`, `token id must be in [0, 2^32) (got ${t})`);
    }
    out[i] = t;
  }
  return out;
}

/** Packs a batch into tokens + offsets, checking offsets against the tokens. */
export function toBatch(fn: string, batch: unknown): { tokens: Uint32Array; offsets: Uint32Array } {
  if (Array.isArray(batch)) {
    const parts = batch.map((seq, i) => toTokenArray(fn, `sequences[${i}]`, seq));
    const total = parts.reduce((n, p) => n + p.length, 0);
    if (total >= U32_LIMIT)
      throw new HashInputError(fn, "sequences", "more than 2^32 - 1 tokens in one batch; split it");
    const tokens = new Uint32Array(total);
    const offsets = new Uint32Array(parts.length + 1);
    let at = 0;
    parts.forEach((p, i) => {
      tokens.set(p, at);
      at += p.length;
      offsets[i + 1] = at;
    });
    return { tokens, offsets };
  }
  if (batch === null || typeof batch !== "object") {
    throw new HashInputError(
      fn,
      "batch",
      `must be {tokens, offsets} or an array of sequences (got ${describe(batch)})`,
    );
  }
  const { tokens, offsets } = batch as { tokens?: unknown; offsets?: unknown };
  const t = toTokenArray(fn, "batch.tokens", tokens);
  if (!(offsets instanceof Uint32Array)) {
    throw new HashInputError(
      fn,
      "batch.offsets",
      `must be a Uint32Array (got ${describe(offsets)})`,
    );
  }
  if (offsets.length < 1)
    throw new HashInputError(fn, "batch.offsets", "must have at least one entry (sequences + 1)");
  for (let i = 0; i < offsets.length; i++) {
    if (offsets[i] > t.length) {
      throw new HashInputError(
        fn,
        `batch.offsets[${i}]`,
        `${offsets[i]} is past the end of the tokens (${t.length})`,
      );
    }
    if (i > 0 && offsets[i] < offsets[i - 1]) {
      throw new HashInputError(
        fn,
        `batch.offsets[${i}]`,
        `offsets must be non-decreasing (${offsets[i]} < ${offsets[i - 1]})`,
      );
    }
  }
  return { tokens: t, offsets };
}
