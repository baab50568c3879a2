// A request's block hashes in a worker's scheme, computed by the addon (the one hash core): the
// int64 hashes that worker publishes in its KV events for the same tokens.
import { blockHashes } from "../../hash/index.js";
import { type HashScheme, hashOptions, type HashNamespace } from "./worker-scheme.js";

export function requestBlockHashes(
  tokens: readonly number[],
  scheme: HashScheme,
  ns: HashNamespace,
): BigInt64Array {
  return blockHashes(tokens as number[], hashOptions(scheme, ns));
}
