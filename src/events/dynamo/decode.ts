// Dynamo's KV-event plane (ZMQ transport, topic "kv-events") onto plain records. A message is
// [topic, publisher id (8 bytes), sequence (8 bytes), envelope]; the envelope is a version byte
// (1), a big-endian u32 length and a MessagePack map {publisher_id, sequence, published_at, topic,
// payload}, whose payload (bytes) is a MessagePack array of router events:
//   {worker_id, storage_tier, residency_domain, dp_rank,
//    event: {event_id, data: {stored: {parent_hash, blocks: [{block_hash, tokens_hash}]}}
//                          | {removed: {block_hashes}} | "cleared"}}
// `block_hash` is the engine's own hash passed through (for SGLang, its page hash chain);
// `tokens_hash` is Dynamo's xxh3 of the block's tokens (hashing.md §2, "local"). Events carry no
// token ids. A bad field is reported by its name.
import { type Tier, tierOfMedium } from "../types.js";
import { decodeMsgpack, MsgpackError, type MsgValue } from "./msgpack.js";

export class DynamoDecodeError extends Error {
  /** The field (dotted path) that was missing or of the wrong kind; "frame" for the framing. */
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

export interface DynamoBlock {
  /** The engine's block hash as kvctl keys it (signed int64). */
  blockHash: bigint;
  /** Dynamo's tokens hash (u64). */
  tokensHash: bigint;
}

export type DynamoEventData =
  | { kind: "stored"; parentHash: bigint | null; blocks: DynamoBlock[] }
  | { kind: "removed"; blockHashes: bigint[] }
  | { kind: "cleared" };

export interface DynamoRecord {
  /** Dynamo's worker id (its serving endpoint's connection id), as a decimal string. */
  dynamoWorker: string;
  dpRank: number;
  tier: Tier;
  /** Dynamo's tier name as sent (device, host_pinned, ...). */
  storageTier: string;
  eventId: bigint;
  data: DynamoEventData;
}

export interface DynamoFrame {
  publisherId: bigint;
  sequence: bigint;
  records: DynamoRecord[];
}

export const DYNAMO_TOPIC = "kv-events";
const ENVELOPE_VERSION = 1;

/** u64 or i64 on the wire -> the signed int64 kvctl keys blocks by (hashing.md §1). */
export function toSigned64(v: bigint): bigint {
  return BigInt.asIntN(64, v);
}

function int(v: MsgValue | undefined, field: string): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  throw new DynamoDecodeError(field, `expected an integer, got ${v === undefined ? "nothing" : typeof v}`);
}

function obj(v: MsgValue | undefined, field: string): { [k: string]: MsgValue } {
  if (v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array)) return v;
  throw new DynamoDecodeError(field, "expected a map");
}

function list(v: MsgValue | undefined, field: string): MsgValue[] {
  if (Array.isArray(v)) return v;
  throw new DynamoDecodeError(field, "expected an array");
}

/** Dynamo's storage tiers onto kvctl's (device -> GPU, host_pinned -> CPU_PINNED, disk, external). */
export function tierOfStorage(name: string): Tier | undefined {
  const t = name.toLowerCase();
  if (t === "device") return "GPU";
  if (t === "host_pinned") return "CPU_PINNED";
  if (t === "disk") return "DISK";
  if (t === "external") return "EXTERNAL";
  return tierOfMedium(name, true);
}

function eventData(v: MsgValue | undefined, field: string): DynamoEventData {
  if (v === "cleared" || v === "Cleared") return { kind: "cleared" };
  const d = obj(v, field);
  if ("cleared" in d) return { kind: "cleared" };
  if ("stored" in d) {
    const s = obj(d.stored, `${field}.stored`);
    const parent = s.parent_hash;
    const blocks = list(s.blocks, `${field}.stored.blocks`).map((b, i) => {
      const f = `${field}.stored.blocks[${i}]`;
      const m = obj(b, f);
      return { blockHash: toSigned64(int(m.block_hash, `${f}.block_hash`)), tokensHash: BigInt.asUintN(64, int(m.tokens_hash, `${f}.tokens_hash`)) };
    });
    return { kind: "stored", parentHash: parent == null ? null : toSigned64(int(parent, `${field}.stored.parent_hash`)), blocks };
  }
  if ("removed" in d) {
    const r = obj(d.removed, `${field}.removed`);
    const hashes = list(r.block_hashes, `${field}.removed.block_hashes`).map((h, i) => toSigned64(int(h, `${field}.removed.block_hashes[${i}]`)));
    return { kind: "removed", blockHashes: hashes };
  }
  throw new DynamoDecodeError(field, `unknown event kind (${Object.keys(d).join(",") || "empty"})`);
}

function record(v: MsgValue, i: number): DynamoRecord {
  const f = `payload[${i}]`;
  const m = obj(v, f);
  const storage = m.storage_tier ?? "device";
  if (typeof storage !== "string") throw new DynamoDecodeError(`${f}.storage_tier`, "expected a string");
  const tier = tierOfStorage(storage);
  if (!tier) throw new DynamoDecodeError(`${f}.storage_tier`, `unknown tier '${storage}'`);
  const ev = obj(m.event, `${f}.event`);
  return {
    dynamoWorker: BigInt.asUintN(64, int(m.worker_id, `${f}.worker_id`)).toString(),
    dpRank: m.dp_rank == null ? 0 : Number(int(m.dp_rank, `${f}.dp_rank`)),
    tier,
    storageTier: storage,
    eventId: int(ev.event_id, `${f}.event.event_id`),
    data: eventData(ev.data, `${f}.event.data`),
  };
}

/** One ZMQ message of Dynamo's kv-events topic. Throws DynamoDecodeError naming the bad field. */
export function decodeDynamoMessage(frames: Uint8Array[]): DynamoFrame {
  if (frames.length !== 4) throw new DynamoDecodeError("frame", `expected 4 ZMQ frames, got ${frames.length}`);
  const env = frames[3];
  if (env.length < 5) throw new DynamoDecodeError("frame", `envelope of ${env.length} bytes`);
  if (env[0] !== ENVELOPE_VERSION) throw new DynamoDecodeError("frame", `envelope version ${env[0]} (expected ${ENVELOPE_VERSION})`);
  const n = new DataView(env.buffer, env.byteOffset, env.byteLength).getUint32(1);
  if (n !== env.length - 5) throw new DynamoDecodeError("frame", `envelope says ${n} bytes, has ${env.length - 5}`);
  let envelope: MsgValue;
  let payload: MsgValue;
  try {
    envelope = decodeMsgpack(env.subarray(5));
  } catch (e) {
    throw new DynamoDecodeError("envelope", e instanceof MsgpackError ? e.message : String(e));
  }
  const m = obj(envelope, "envelope");
  if (!(m.payload instanceof Uint8Array)) throw new DynamoDecodeError("envelope.payload", "expected bytes");
  try {
    payload = decodeMsgpack(m.payload);
  } catch (e) {
    throw new DynamoDecodeError("payload", e instanceof MsgpackError ? e.message : String(e));
  }
  return {
    publisherId: int(m.publisher_id, "envelope.publisher_id"),
    sequence: int(m.sequence, "envelope.sequence"),
    records: list(payload, "payload").map(record),
  };
}
