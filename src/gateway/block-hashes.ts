// A request's block hashes in a worker's scheme, computed by the addon (the one hash core): the
// int64 hashes that worker publishes in its KV events for the same tokens.
import { blockHashes } from "../hash/index.js";
import { type HashScheme, hashOptions } from "./worker-scheme.js";

export interface HashNamespace {
  /** The request's `cache_salt` (SGLang seeds the event chain with it). */
  cacheSalt: string | null;
  /** The request's `extra_key`. */
  extraKey: string | null;
}

/** Reads the namespace fields of a request body (wrong types are the caller's 400, checked there). */
export function namespaceOf(body: Record<string, unknown>): HashNamespace {
  return {
    cacheSalt: typeof body.cache_salt === "string" && body.cache_salt !== "" ? body.cache_salt : null,
    extraKey: typeof body.extra_key === "string" ? body.extra_key : null,
  };
}

export function requestBlockHashes(tokens: readonly number[], scheme: HashScheme, ns: HashNamespace): BigInt64Array {
  return blockHashes(tokens as number[], hashOptions(scheme, ns));
}
