// A request's block hashes in a worker's scheme, computed by the addon (the one hash core): the
// int64 hashes that worker publishes in its KV events for the same tokens.
import { blockHashes } from "../../hash/index.js";
import { type HashScheme, hashOptions } from "./worker-scheme.js";

export interface HashNamespace {
  /** The request's `cache_salt` (SGLang seeds the event chain with it). */
  cacheSalt: string | null;
  /** The request's `extra_key`. */
  extraKey: string | null;
}

export function requestBlockHashes(
  tokens: readonly number[],
  scheme: HashScheme,
  ns: HashNamespace,
): BigInt64Array {
  return blockHashes(tokens as number[], hashOptions(scheme, ns));
}
