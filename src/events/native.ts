// The native KV-event batch decoder (native/events: bounded msgpack reader + engine adapters):
// one addon call per payload, results as flat columns (hashes as a BigInt64Array, tokens as a
// Uint32Array). `columnsToBatch` turns columns into engine-neutral event objects for tools and
// listeners (decode.ts); the index applies frames without either (src/index/native.ts).
import { addonPart } from "../addon.js";
import { EVENT_KINDS } from "../native-tables.js";
import type { BadEvent, DecodedBatch, KvEvent, Tier } from "./types.js";
import { BatchDecodeError, TIERS } from "./types.js";

export interface EventColumns {
  ts: number;
  dpRank: number | null;
  form: "array" | "map";
  /** Valid events decoded (bad ones are left out and listed in `bad`). */
  count: number;
  /** Index into EVENT_KINDS (native-tables.ts): BlockStored, BlockRemoved, AllBlocksCleared. */
  kinds: Uint8Array;
  /** Index into TIERS. */
  tiers: Uint8Array;
  blockSizes: Int32Array;
  hashOffsets: Uint32Array;
  hashes: BigInt64Array;
  parents: BigInt64Array;
  hasParent: Uint8Array;
  /** bit0: token_ids came as bigram pairs; bit1: the event carried a medium. */
  flags: Uint8Array;
  tokenOffsets: Uint32Array;
  /** Empty unless tokens were asked for. */
  tokens: Uint32Array;
  /** Events with optional strings (or a non-canonical medium), by position in the decoded events. */
  extras: {
    index: number;
    medium: string | null;
    cacheSalt: string | null;
    sessionId: string | null;
    loraName: string | null;
    loraId: number | null;
  }[];
  /** `index` here is the position in the batch's wire array. */
  bad: BadEvent[];
}

export type NativeResult =
  | number
  | { error: string; kind: string }
  | { bytes: number; extras: EventColumns["extras"]; bad: BadEvent[] };

interface NativeEvents {
  decodeKvEventBatchInto(payload: Uint8Array, out: Uint8Array, wantTokens: boolean): NativeResult;
}

let native: NativeEvents | null | undefined;

function addon(): NativeEvents | null {
  if (native === undefined) {
    try {
      native = addonPart<NativeEvents>("events", ["decodeKvEventBatchInto"]);
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

let scratch = new ArrayBuffer(1 << 16);
let scratchU8 = new Uint8Array(scratch);
const al8 = (n: number) => (n + 7) & ~7;

/**
 * Decodes a payload into columns with one addon call. The columns are views of a scratch buffer
 * that the next call overwrites: use (or copy) them before decoding again. Throws
 * BatchDecodeError for an undecodable batch.
 */
export function decodeBatchColumns(payload: Uint8Array, wantTokens = false): EventColumns {
  const a = addon();
  if (!a)
    throw new Error(
      "the loaded kvctl addon has no decodeKvEventBatchInto (rebuild it: npm run build:native)",
    );
  return columnsOf(payload, wantTokens, (out) =>
    a.decodeKvEventBatchInto(payload, out, wantTokens),
  );
}

/**
 * Columns from `write`, an addon call that fills the scratch buffer as decodeKvEventBatchInto
 * does (the index's applyFrameColumns decodes and applies in one go, for instance): when the
 * buffer is too small it grows, and the payload is decoded again by the decoder alone, so
 * `write` runs exactly once. Same views and errors as decodeBatchColumns.
 */
export function columnsOf(
  payload: Uint8Array,
  wantTokens: boolean,
  write: (out: Uint8Array) => NativeResult,
): EventColumns {
  let r = write(scratchU8);
  if (typeof r === "number" && r < 0) {
    scratch = new ArrayBuffer(al8(-r) * 2);
    scratchU8 = new Uint8Array(scratch);
    r = (addon() as NativeEvents).decodeKvEventBatchInto(payload, scratchU8, wantTokens);
  }
  if (typeof r === "object" && "error" in r) throw new BatchDecodeError(r.error, r.kind);
  const head = new Float64Array(scratch, 0, 8);
  const n = head[3];
  const nh = head[4];
  const nt = head[5];
  let o = 64;
  const take = <T>(make: (off: number) => T, bytes: number): T => {
    const v = make(o);
    o += al8(bytes);
    return v;
  };
  const kinds = take((x) => new Uint8Array(scratch, x, n), n);
  const tiers = take((x) => new Uint8Array(scratch, x, n), n);
  const hasParent = take((x) => new Uint8Array(scratch, x, n), n);
  const flags = take((x) => new Uint8Array(scratch, x, n), n);
  const blockSizes = take((x) => new Int32Array(scratch, x, n), n * 4);
  const hashOffsets = take((x) => new Uint32Array(scratch, x, n + 1), (n + 1) * 4);
  const tokenOffsets = take((x) => new Uint32Array(scratch, x, n + 1), (n + 1) * 4);
  const parents = take((x) => new BigInt64Array(scratch, x, n), n * 8);
  const hashes = take((x) => new BigInt64Array(scratch, x, nh), nh * 8);
  const tokens = take((x) => new Uint32Array(scratch, x, nt), nt * 4);
  return {
    ts: head[0],
    dpRank: Number.isNaN(head[1]) ? null : head[1],
    form: head[2] === 1 ? "map" : "array",
    count: n,
    kinds,
    tiers,
    blockSizes,
    hashOffsets,
    hashes,
    parents,
    hasParent,
    flags,
    tokenOffsets,
    tokens,
    extras: typeof r === "object" ? r.extras : [],
    bad: typeof r === "object" ? r.bad : [],
  };
}

/** Columns (decoded with tokens) -> the engine-neutral batch, as decode.ts would return it. */
export function columnsToBatch(c: EventColumns): DecodedBatch {
  const extras = new Map(c.extras.map((x) => [x.index, x]));
  const events: KvEvent[] = [];
  for (let i = 0; i < c.count; i++) {
    const hashes = Array.from(c.hashes.subarray(c.hashOffsets[i], c.hashOffsets[i + 1]));
    const x = extras.get(i);
    const tier = TIERS[c.tiers[i]] as Tier;
    const medium = x?.medium ?? (c.flags[i] & 2 ? tier : null);
    const kind = EVENT_KINDS[c.kinds[i]];
    if (kind === "AllBlocksCleared") events.push({ type: "AllBlocksCleared" });
    else if (kind === "BlockRemoved")
      events.push({ type: "BlockRemoved", blockHashes: hashes, medium, tier });
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
        bigram: (c.flags[i] & 1) === 1,
      });
  }
  return { batch: { ts: c.ts, events, dpRank: c.dpRank }, bad: [...c.bad], form: c.form };
}
