// Field schemas shared by the commands: int64 hash lists, TTLs, ids. Lists are checked in one
// transform rather than one zod schema per element, which keeps a 64k-hash command cheap.
import { z } from "zod";
import { toInt64 } from "./int64.js";
import {
  MAX_ID_LENGTH,
  MAX_LIST_ENTRIES,
  MAX_PREFETCH_DEADLINE_MS,
  MAX_TOKEN_IDS,
  MAX_TTL_SECONDS,
} from "./limits.js";

/** One int64 (bigint, exact integer number, or decimal string on input; bigint on output). */
export const int64 = z.unknown().transform((value, ctx): bigint => {
  const v = toInt64(value);
  if (typeof v === "string") {
    ctx.issues.push({ code: "custom", message: v, input: value });
    return z.NEVER;
  }
  return v;
});

/** A list of int64 block hashes, at most MAX_LIST_ENTRIES long. */
export const int64List = z.unknown().transform((value, ctx): bigint[] => {
  if (!Array.isArray(value)) {
    ctx.issues.push({
      code: "custom",
      message: `expected an array of int64, got ${describe(value)}`,
      input: value,
    });
    return z.NEVER;
  }
  if (value.length > MAX_LIST_ENTRIES) {
    ctx.issues.push({
      code: "custom",
      message: `${value.length} entries is over the limit of ${MAX_LIST_ENTRIES}`,
      input: value.length,
    });
    return z.NEVER;
  }
  const out = new Array<bigint>(value.length);
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    const r = toInt64(v);
    if (typeof r === "string") {
      ctx.issues.push({ code: "custom", message: r, input: v, path: [i] });
      return z.NEVER;
    }
    out[i] = r;
  }
  return out;
});

function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
}

/** A TTL in whole seconds: positive and bounded (a zero or month-long TTL is a mistake). */
export const ttlSeconds = z
  .number()
  .int("must be a whole number of seconds")
  .min(1, "must be at least 1 second")
  .max(MAX_TTL_SECONDS, `must be at most ${MAX_TTL_SECONDS} seconds (30 days)`);

/** The description that marks a deadline in the JSON Schema (the table generator reads it). */
export const DEADLINE_DESCRIPTION =
  "Deadline in whole milliseconds from the worker's receipt of the command.";

/** A worker-side deadline in whole milliseconds: positive and bounded (a caller waits on it). */
export const deadlineMs = z
  .number()
  .int("must be a whole number of milliseconds")
  .min(1, "must be at least 1 millisecond")
  .max(MAX_PREFETCH_DEADLINE_MS, `must be at most ${MAX_PREFETCH_DEADLINE_MS} milliseconds`)
  .describe(DEADLINE_DESCRIPTION);

/** Printable ASCII without spaces: what ids may hold. */
export const ID_PATTERN = /^[\x21-\x7e]+$/;
/** A SHA-256 hex digest, as storage keys are written. */
export const STORAGE_KEY_PATTERN = /^[0-9a-f]{64}$/;

/** Lease, session and idempotency ids: non-empty, bounded, printable. */
export const idString = z
  .string()
  .min(1, "must not be empty")
  .max(MAX_ID_LENGTH, `must be at most ${MAX_ID_LENGTH} characters`)
  .regex(ID_PATTERN, "must be printable ASCII without spaces");

/** Storage keys (SHA-256 hex), as Warm carries them. */
export const storageKeyList = z
  .array(
    z
      .string()
      .regex(STORAGE_KEY_PATTERN, "must be a SHA-256 hex digest (64 lowercase hex characters)"),
  )
  .max(MAX_LIST_ENTRIES, `must have at most ${MAX_LIST_ENTRIES} entries`);

/** Token ids for Warm. */
export const tokenIdList = z
  .array(
    z
      .number()
      .int()
      .min(0)
      .max(2 ** 31 - 1),
  )
  .max(MAX_TOKEN_IDS, `must have at most ${MAX_TOKEN_IDS} entries`);

/** Non-negative safe integer (counts, epochs, timestamps). */
export const count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
