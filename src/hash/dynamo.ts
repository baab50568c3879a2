// Dynamo KV-router hashes (hashing.md §2): LocalBlockHash (xxh3 of a block's tokens, seeded by
// LoRA name and cache namespace) and SequenceHash (the chain over them). Values are u64.
import { loadAddon } from "../addon.js";
import { parseOptions } from "./errors.js";
import { type SequenceBatch, type Tokens, toBatch, toTokenArray } from "./input.js";
import { type DynamoOptions, dynamoOptionsSchema } from "./options.js";

export interface DynamoHashes {
  /** blockOffsets[s] .. blockOffsets[s + 1] are sequence s's blocks. */
  blockOffsets: Uint32Array;
  local: BigUint64Array;
  sequence: BigUint64Array;
}

function run(
  fn: string,
  batch: { tokens: Uint32Array; offsets: Uint32Array | null },
  options: DynamoOptions,
): DynamoHashes {
  const o = parseOptions(fn, "options", dynamoOptionsSchema, options);
  const native = loadAddon();
  const seed = native.dynamoSeed(o.loraName ?? null, o.cacheNamespace ?? null);
  return native.dynamoHashes(batch.tokens, batch.offsets, o.blockSize, o.eagle ?? false, seed);
}

/** LocalBlockHash of each complete block of one sequence. */
export function dynamoBlockHashes(tokens: Tokens, options: DynamoOptions): BigUint64Array {
  const fn = "dynamoBlockHashes";
  return run(fn, { tokens: toTokenArray(fn, "tokens", tokens), offsets: null }, options).local;
}

/** SequenceHash of each complete block of one sequence. */
export function dynamoSequenceHashes(tokens: Tokens, options: DynamoOptions): BigUint64Array {
  const fn = "dynamoSequenceHashes";
  return run(fn, { tokens: toTokenArray(fn, "tokens", tokens), offsets: null }, options).sequence;
}

/** Both, for many sequences in one native call. */
export function dynamoHashesBatch(batch: SequenceBatch, options: DynamoOptions): DynamoHashes {
  const fn = "dynamoHashesBatch";
  return run(fn, toBatch(fn, batch), options);
}

/** The block-hash seed for a LoRA name / cache namespace (1337 when both are absent). */
export function dynamoSeed(loraName?: string | null, cacheNamespace?: string | null): bigint {
  return loadAddon().dynamoSeed(loraName ?? null, cacheNamespace ?? null);
}
