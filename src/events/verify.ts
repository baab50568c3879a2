// Recomputing a BlockStored's hashes from its token ids with the addon (src/hash), the way the
// worker computed them: the event chain continues from the parent block's 32-byte digest (or, at
// the root, from the cache_salt seed), and the published int64 may be namespaced (LoRA, or
// Dynamo format). Used by `kvctl verify-hashes --zmq` and as the index's token hasher (dual key).
import { blockHashesWithDigests } from "../hash/index.js";
import type { BlockStoredEvent } from "./types.js";

export interface RecomputeOptions {
  /** Page size; defaults to the event's block_size. */
  pageSize?: number;
  /** The worker's --kv-events-config format. */
  eventFormat?: "sglang" | "dynamo";
  /** RadixKey.extra_key of the traffic (not on the wire; needed for LoRA/Dynamo namespacing). */
  extraKey?: string | null;
  extraKeyIsLora?: boolean;
  /** Overrides the event's cache_salt. */
  cacheSalt?: string | null;
}

export type Recomputed =
  | { kind: "ok"; hashes: bigint[]; digests: Buffer; firstMismatch: number | null }
  | { kind: "unverifiable"; reason: string };

/** Token ids as the hash API takes them: bigram pairs become firsts + the last second. */
function hashTokens(e: BlockStoredEvent): number[] {
  if (!e.bigram) return e.tokenIds;
  const out: number[] = [];
  for (let i = 0; i < e.tokenIds.length; i += 2) out.push(e.tokenIds[i]);
  if (e.tokenIds.length) out.push(e.tokenIds[e.tokenIds.length - 1]);
  return out;
}

export function recomputeStored(
  e: BlockStoredEvent,
  parentDigest: Uint8Array | null,
  o: RecomputeOptions = {},
): Recomputed {
  if (e.parentBlockHash !== null && !parentDigest)
    return { kind: "unverifiable", reason: "parent not seen" };
  const pageSize = o.pageSize ?? e.blockSize;
  const units = e.bigram ? e.tokenIds.length / 2 : e.tokenIds.length;
  if (units !== e.blockHashes.length * pageSize) {
    return {
      kind: "unverifiable",
      reason: `${units} tokens for ${e.blockHashes.length} page(s) of ${pageSize}`,
    };
  }
  if (e.loraName !== null && o.extraKey == null) {
    return { kind: "unverifiable", reason: `LoRA '${e.loraName}' namespace needs --extra-key` };
  }
  const tokens = hashTokens(e);
  const cacheSalt = o.cacheSalt !== undefined ? o.cacheSalt : e.cacheSalt;
  const prior = parentDigest ? (parentDigest as Uint8Array<ArrayBuffer>) : null;
  const r = blockHashesWithDigests(tokens, {
    pageSize,
    bigram: e.bigram,
    cacheSalt,
    extraKey: o.extraKey ?? null,
    prior,
    eventFormat: o.eventFormat ?? "sglang",
    extraKeyIsLora: o.extraKeyIsLora ?? false,
  });
  const digests = r.digests;
  const hashes = Array.from(r.hashes);
  let firstMismatch: number | null = null;
  for (let i = 0; i < hashes.length; i++) {
    if (hashes[i] !== e.blockHashes[i]) {
      firstMismatch = i;
      break;
    }
  }
  return { kind: "ok", hashes, digests, firstMismatch };
}
