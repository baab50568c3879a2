// The index's token hasher for SGLang workers (dual key): recomputes a BlockStored's hashes from
// its token ids with the addon, chained from the parent's digest the index kept.
import { recomputeStored, type RecomputeOptions } from "../events/verify.js";
import type { TokenHasher } from "./memory.js";

export function sglangTokenHasher(opts: RecomputeOptions = {}): TokenHasher {
  return (parentDigest, event) => {
    const r = recomputeStored(event, parentDigest, opts);
    return r.kind === "ok" ? { hashes: r.hashes, digests: r.digests } : null;
  };
}
