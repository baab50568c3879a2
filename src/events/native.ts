// The native KV-event batch decoder (native/events/kv_events.cpp, msgpack-c): one addon call per
// payload, results as flat columns (hashes as a BigInt64Array, tokens as a Uint32Array), so the
// hot path never builds a JS value per token. `columnsToBatch` turns columns into the same
// DecodedBatch the JS decoder (decode.ts) returns; both apply the same validation rules.
import { loadAddon } from "../addon.js";
import { BatchDecodeError } from "./decode.js";
import type { BadEvent, DecodedBatch, KvEvent, Tier } from "./types.js";
import { TIERS } from "./types.js";

export interface EventColumns {
  ts: number;
  dpRank: number | null;
  form: "array" | "map";
  /** Valid events decoded (bad ones are left out and listed in `bad`). */
  count: number;
  /** 0 BlockStored, 1 BlockRemoved, 2 AllBlocksCleared. */
  kinds: Uint8Array;
  /** Index into TIERS. */
  tiers: Uint8Array;
  blockSizes: Int32Array;
  hashOffsets: Uint32Array;
  hashes: BigInt64Array;
  parents: BigInt64Array;
  hasParent: Uint8Array;
  bigram: Uint8Array;
  tokenOffsets: Uint32Array;
  /** Empty unless tokens were asked for. */
  tokens: Uint32Array;
  /** Events with any optional string field (or lora_id), by position in the decoded events. */
  extras: { index: number; medium: string | null; cacheSalt: string | null; sessionId: string | null; loraName: string | null; loraId: number | null }[];
  /** `index` here is the position in the batch's wire array. */
  bad: BadEvent[];
}

interface NativeEvents {
  decodeKvEventBatch(payload: Uint8Array, wantTokens: boolean): EventColumns | { error: string };
}

let native: NativeEvents | null | undefined;

function addon(): NativeEvents | null {
  if (native === undefined) {
    try {
      const a = loadAddon() as unknown as Partial<NativeEvents>;
      native = typeof a.decodeKvEventBatch === "function" ? (a as NativeEvents) : null;
    } catch {
      native = null;
    }
  }
  return native;
}

/** Whether the loaded addon has the native decoder (an older build may not). */
export function nativeDecoderAvailable(): boolean {
  return addon() !== null;
}

/** Decodes a payload into columns. Throws BatchDecodeError for an undecodable batch. */
export function decodeBatchColumns(payload: Uint8Array, wantTokens = false): EventColumns {
  const a = addon();
  if (!a) throw new Error("the loaded kvctl addon has no decodeKvEventBatch (rebuild it: npm run build:native)");
  const r = a.decodeKvEventBatch(payload, wantTokens);
  if ("error" in r) throw new BatchDecodeError(r.error);
  return r;
}

/** Columns (decoded with tokens) -> the engine-neutral batch, as decode.ts would return it. */
export function columnsToBatch(c: EventColumns): DecodedBatch {
  const extras = new Map(c.extras.map((x) => [x.index, x]));
  const events: KvEvent[] = [];
  for (let i = 0; i < c.count; i++) {
    const hashes = Array.from(c.hashes.subarray(c.hashOffsets[i], c.hashOffsets[i + 1]));
    const x = extras.get(i);
    const medium = x?.medium ?? null;
    const tier = TIERS[c.tiers[i]] as Tier;
    if (c.kinds[i] === 2) events.push({ type: "AllBlocksCleared" });
    else if (c.kinds[i] === 1) events.push({ type: "BlockRemoved", blockHashes: hashes, medium, tier });
    else
      events.push({
        type: "BlockStored",
        blockHashes: hashes,
        parentBlockHash: c.hasParent[i] ? c.parents[i] : null,
        tokenIds: Array.from(c.tokens.subarray(c.tokenOffsets[i], c.tokenOffsets[i + 1])),
        blockSize: c.blockSizes[i],
        loraId: x?.loraId ?? null,
        medium,
        tier,
        cacheSalt: x?.cacheSalt ?? null,
        sessionId: x?.sessionId ?? null,
        loraName: x?.loraName ?? null,
        bigram: c.bigram[i] === 1,
      });
  }
  return { batch: { ts: c.ts, events, dpRank: c.dpRank }, bad: c.bad, form: c.form };
}

/** Native equivalent of decode.ts's decodeBatch. */
export function decodeBatchNative(payload: Uint8Array): DecodedBatch {
  return columnsToBatch(decodeBatchColumns(payload, true));
}
