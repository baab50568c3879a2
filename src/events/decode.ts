// Decoding of KV event batches from the wire (msgpack payload of frame 3).
//
// Accepted shapes (see the report in the issue and sglang/srt/disaggregation/kv_events.py):
//   batch : [ts, events, dp_rank] (SGLang and vLLM; 2 elements on the oldest vLLM) or a map
//           {ts, events, attn_dp_rank | data_parallel_rank | dp_rank}
//   event : a tagged map {"type": "BlockStored", block_hashes, parent_block_hash, token_ids, ...}
//           (SGLang 0.5.23 and vLLM >= PR #42892; optional fields omitted when None), or a
//           positional array ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, x]
//           where x is SGLang's metadata map {cache_salt, session_id} or vLLM's lora_name string.
// Hashes arrive as msgpack uint64 or int64; both are normalised to signed 64-bit bigint.
// Validation is per event and complete before anything is returned, so a caller never applies
// half an event: a bad event is reported in `bad` and left out, the rest of the batch stands.
import { Unpackr } from "msgpackr";
import type {
  BadEvent,
  BlockRemovedEvent,
  BlockStoredEvent,
  DecodedBatch,
  KvEvent,
} from "./types.js";
import { tierOfMedium } from "./types.js";

/** Raised for a payload that cannot be decoded as a batch at all. */
export class BatchDecodeError extends Error {}

class EventError extends Error {}

const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "bigint" });

/** msgpack bytes -> plain JS values, int64/uint64 as bigint. Throws BatchDecodeError. */
export function unpackPayload(payload: Uint8Array): unknown {
  try {
    return unpackr.unpack(payload as Buffer);
  } catch (err) {
    throw new BatchDecodeError(`msgpack: ${err instanceof Error ? err.message : String(err)}`);
  }
}

const U64 = 1n << 64n;
const I64_MIN = -(1n << 63n);

/** Normalises a wire hash (number or bigint, signed or unsigned 64-bit) to signed int64. */
export function toSignedHash(v: unknown): bigint {
  let b: bigint;
  if (typeof v === "bigint") b = v;
  else if (typeof v === "number" && Number.isSafeInteger(v)) b = BigInt(v);
  else throw new EventError(`non-integer hash ${describe(v)}`);
  if (b < I64_MIN || b >= U64) throw new EventError(`hash ${b} outside 64 bits`);
  return BigInt.asIntN(64, b);
}

function describe(v: unknown): string {
  if (v instanceof Uint8Array) return `bytes[${v.length}]`;
  if (v === null || v === undefined) return String(v);
  if (Array.isArray(v)) return "array";
  return `${typeof v} ${String(v).slice(0, 40)}`;
}

function hashes(v: unknown, field: string): bigint[] {
  if (!Array.isArray(v)) throw new EventError(`${field} is ${describe(v)}, not an array`);
  const out = new Array<bigint>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = toSignedHash(v[i]);
  return out;
}

function optHash(v: unknown, field: string): bigint | null {
  if (v === null || v === undefined) return null;
  try {
    return toSignedHash(v);
  } catch (e) {
    throw new EventError(`${field}: ${(e as Error).message}`);
  }
}

function isU32(t: unknown): t is number {
  return typeof t === "number" && Number.isInteger(t) && t >= 0 && t <= 0xffffffff;
}

function tokens(v: unknown): { ids: number[]; bigram: boolean } {
  if (!Array.isArray(v)) throw new EventError(`token_ids is ${describe(v)}, not an array`);
  if (v.length > 0 && Array.isArray(v[0])) {
    // EAGLE bigram pages: [[t0, t1], [t1, t2], ...]
    const ids: number[] = [];
    for (const pair of v) {
      if (!Array.isArray(pair) || pair.length !== 2 || !isU32(pair[0]) || !isU32(pair[1]))
        throw new EventError("bad bigram token pair");
      ids.push(pair[0], pair[1]);
    }
    return { ids, bigram: true };
  }
  for (let i = 0; i < v.length; i++) {
    if (!isU32(v[i])) throw new EventError(`token_ids[${i}] = ${describe(v[i])} is not a uint32`);
  }
  return { ids: v as number[], bigram: false };
}

function optInt(v: unknown, field: string): number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "bigint") return Number(v);
  throw new EventError(`${field} is ${describe(v)}, not an int`);
}

function optStr(v: unknown, field: string): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "string") return v;
  throw new EventError(`${field} is ${describe(v)}, not a string`);
}

function blockSize(v: unknown): number {
  const n = optInt(v, "block_size");
  if (n === null || n <= 0) throw new EventError(`block_size ${describe(v)} is not a positive int`);
  return n;
}

function tierOf(medium: string | null): BlockStoredEvent["tier"] {
  const t = tierOfMedium(medium, true);
  if (!t) throw new EventError(`unknown medium '${medium}'`);
  return t;
}

function stored(
  hashesV: unknown,
  parentV: unknown,
  tokensV: unknown,
  sizeV: unknown,
  loraIdV: unknown,
  mediumV: unknown,
  cacheSaltV: unknown,
  sessionIdV: unknown,
  loraNameV: unknown,
): BlockStoredEvent {
  const blockHashes = hashes(hashesV, "block_hashes");
  const tok = tokens(tokensV);
  const size = blockSize(sizeV);
  const medium = optStr(mediumV, "medium");
  return {
    type: "BlockStored",
    blockHashes,
    parentBlockHash: optHash(parentV, "parent_block_hash"),
    tokenIds: tok.ids,
    blockSize: size,
    loraId: optInt(loraIdV, "lora_id"),
    medium,
    tier: tierOf(medium),
    cacheSalt: optStr(cacheSaltV, "cache_salt"),
    sessionId: optStr(sessionIdV, "session_id"),
    loraName: optStr(loraNameV, "lora_name"),
    bigram: tok.bigram,
  };
}

function removed(hashesV: unknown, mediumV: unknown): BlockRemovedEvent {
  const medium = optStr(mediumV, "medium");
  return { type: "BlockRemoved", blockHashes: hashes(hashesV, "block_hashes"), medium, tier: tierOf(medium) };
}

/** Decodes one event in any accepted form. Throws EventError (reported as a bad event). */
export function decodeEvent(raw: unknown): KvEvent {
  if (Array.isArray(raw)) {
    const tag = raw[0];
    switch (tag) {
      case "BlockStored": {
        if (raw.length < 5) throw new EventError(`BlockStored has ${raw.length} fields, needs >= 5`);
        // Position 7: SGLang's metadata map {cache_salt, session_id} or vLLM's lora_name.
        const x = raw[7];
        let salt: unknown = null;
        let session: unknown = null;
        let loraName: unknown = null;
        if (x !== null && typeof x === "object" && !Array.isArray(x) && !(x instanceof Uint8Array)) {
          const m = x as Record<string, unknown>;
          salt = m.cache_salt;
          session = m.session_id;
          loraName = m.lora_name;
        } else loraName = x;
        return stored(raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], salt, session, loraName);
      }
      case "BlockRemoved":
        if (raw.length < 2) throw new EventError("BlockRemoved without block_hashes");
        return removed(raw[1], raw[2]);
      case "AllBlocksCleared":
        return { type: "AllBlocksCleared" };
      default:
        throw new EventError(`unknown event tag ${describe(tag)}`);
    }
  }
  if (raw !== null && typeof raw === "object" && !(raw instanceof Uint8Array)) {
    const m = raw as Record<string, unknown>;
    switch (m.type) {
      case "BlockStored": {
        const meta = (m.metadata ?? null) as Record<string, unknown> | null;
        return stored(
          m.block_hashes,
          m.parent_block_hash,
          m.token_ids,
          m.block_size,
          m.lora_id,
          m.medium,
          m.cache_salt ?? meta?.cache_salt,
          m.session_id ?? meta?.session_id,
          m.lora_name,
        );
      }
      case "BlockRemoved":
        return removed(m.block_hashes, m.medium);
      case "AllBlocksCleared":
        return { type: "AllBlocksCleared" };
      default:
        throw new EventError(`unknown event tag ${describe(m.type)}`);
    }
  }
  throw new EventError(`event is ${describe(raw)}`);
}

/** Decodes an already-unpacked batch value. Throws BatchDecodeError for a malformed batch. */
export function decodeBatchValue(v: unknown): DecodedBatch {
  let ts: unknown;
  let events: unknown;
  let dp: unknown;
  let form: DecodedBatch["form"];
  if (Array.isArray(v)) {
    if (v.length < 2 || v.length > 3) throw new BatchDecodeError(`batch array has ${v.length} elements, expected 2 or 3`);
    [ts, events, dp] = v;
    form = "array";
  } else if (v !== null && typeof v === "object" && !(v instanceof Uint8Array)) {
    const m = v as Record<string, unknown>;
    ts = m.ts;
    events = m.events;
    dp = m.attn_dp_rank ?? m.data_parallel_rank ?? m.dp_rank;
    form = "map";
  } else throw new BatchDecodeError(`batch is ${describe(v)}`);
  if (typeof ts === "bigint") ts = Number(ts);
  if (typeof ts !== "number") throw new BatchDecodeError(`batch ts is ${describe(ts)}`);
  if (!Array.isArray(events)) throw new BatchDecodeError(`batch events is ${describe(events)}`);
  let dpRank: number | null = null;
  if (dp !== null && dp !== undefined) {
    if (typeof dp !== "number" || !Number.isInteger(dp)) throw new BatchDecodeError(`batch dp_rank is ${describe(dp)}`);
    dpRank = dp;
  }
  const out: KvEvent[] = [];
  const bad: BadEvent[] = [];
  for (let i = 0; i < events.length; i++) {
    try {
      out.push(decodeEvent(events[i]));
    } catch (e) {
      if (!(e instanceof EventError)) throw e;
      bad.push({ index: i, reason: e.message });
    }
  }
  return { batch: { ts, events: out, dpRank }, bad, form };
}

/** msgpack payload -> decoded batch. Throws BatchDecodeError for an undecodable payload. */
export function decodeBatch(payload: Uint8Array): DecodedBatch {
  return decodeBatchValue(unpackPayload(payload));
}

/** The seq frame: 8 bytes big-endian. Returns a signed bigint (END_SEQ reads as -1). */
export function decodeSeq(frame: Uint8Array): bigint {
  if (frame.length !== 8) throw new BatchDecodeError(`seq frame has ${frame.length} bytes, expected 8`);
  return Buffer.from(frame.buffer, frame.byteOffset, 8).readBigInt64BE(0);
}

export function encodeSeq(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(BigInt.asIntN(64, seq));
  return b;
}

export const END_SEQ = -1n;
