// Dynamo's KV-event plane (ZMQ transport, topic "kv-events") onto plain records. A message is
// [topic, publisher id (8 bytes), sequence (8 bytes), envelope]. The envelope is decoded by the
// addon's event decoder (native/events/adapters/dynamo_envelope.h describes its form), which
// hands back flat columns; this turns them into records. `block_hash` is the engine's own hash
// passed through (for SGLang, its page hash chain); `tokens_hash` is Dynamo's xxh3 of the block's
// tokens (hashing.md §2, "local"). Events carry no token ids. A bad field is reported by its name.
import { addonPart } from "../../addon.js";
import { type Tier, TIERS } from "../types.js";
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

/** u64 or i64 on the wire -> the signed int64 kvctl keys blocks by (hashing.md §1). */
export function toSigned64(v: bigint): bigint {
  return BigInt.asIntN(64, v);
}

type NativeVerdict = string[] | number | { error: string; field: string };

interface NativeDynamo {
  decodeDynamoEnvelopeInto(envelope: Uint8Array, out: Uint8Array): NativeVerdict;
  dynamoTierOfStorage(name: string): number;
}

let native: NativeDynamo | undefined;
const addon = () =>
  (native ??= addonPart<NativeDynamo>("events", [
    "decodeDynamoEnvelopeInto",
    "dynamoTierOfStorage",
  ]));

/** Dynamo's storage tiers onto kvctl's (device -> GPU, host_pinned -> CPU_PINNED, disk, external). */
export function tierOfStorage(name: string): Tier | undefined {
  const t = addon().dynamoTierOfStorage(name);
  return t < 0 ? undefined : TIERS[t];
}

const DATA_KINDS = ["stored", "removed", "cleared"] as const;
const al8 = (n: number) => (n + 7) & ~7;
let scratch = new ArrayBuffer(1 << 14);
let scratchU8 = new Uint8Array(scratch);

/** One ZMQ message of Dynamo's kv-events topic. Throws DynamoDecodeError naming the bad field. */
export function decodeDynamoMessage(frames: Uint8Array[]): DynamoFrame {
  if (frames.length !== 4)
    throw new DynamoDecodeError("frame", `expected 4 ZMQ frames, got ${frames.length}`);
  const a = addon();
  let r = a.decodeDynamoEnvelopeInto(frames[3], scratchU8);
  if (typeof r === "number") {
    // Too small for this frame: grow, and decode it again.
    scratch = new ArrayBuffer(al8(-r) * 2);
    scratchU8 = new Uint8Array(scratch);
    r = a.decodeDynamoEnvelopeInto(frames[3], scratchU8);
    if (typeof r === "number")
      throw new Error(`decodeDynamoEnvelopeInto wants ${-r} bytes after growing to them`);
  }
  if (!Array.isArray(r)) throw new DynamoDecodeError(r.field, r.error);
  return framesOf(r);
}

/** The columns decodeDynamoEnvelopeInto wrote (its comment in native/addon/dynamo_events.cpp). */
function framesOf(storageTiers: string[]): DynamoFrame {
  const head = new BigInt64Array(scratch, 0, 8);
  const [n, nb, nh] = [Number(head[3]), Number(head[4]), Number(head[5])];
  let o = 64;
  const take = <T>(make: (off: number, len: number) => T, len: number, width: number): T => {
    const v = make(o, len);
    o += al8(len * width);
    return v;
  };
  const i64 = (len: number) => take((x, l) => new BigInt64Array(scratch, x, l), len, 8);
  const u64 = (len: number) => take((x, l) => new BigUint64Array(scratch, x, l), len, 8);
  const u32 = (len: number) => take((x, l) => new Uint32Array(scratch, x, l), len, 4);
  const u8 = (len: number) => take((x, l) => new Uint8Array(scratch, x, l), len, 1);
  const worker = u64(n);
  const eventId = i64(n);
  const parent = i64(n);
  const dpRank = take((x, l) => new Float64Array(scratch, x, l), n, 8);
  const blockHash = i64(nb);
  const tokensHash = u64(nb);
  const hashes = i64(nh);
  const [begin, end, name] = [u32(n), u32(n), u32(n)];
  const [kind, tier, flags] = [u8(n), u8(n), u8(n)];
  // A wire value below zero keeps its sign; any other comes back as the unsigned it was sent as.
  const wire = (bits: bigint, negative: boolean) => (negative ? bits : BigInt.asUintN(64, bits));
  const records: DynamoRecord[] = [];
  for (let i = 0; i < n; i++) {
    const k = DATA_KINDS[kind[i]];
    let data: DynamoEventData;
    if (k === "stored") {
      const blocks: DynamoBlock[] = [];
      for (let j = begin[i]; j < end[i]; j++)
        blocks.push({ blockHash: blockHash[j], tokensHash: tokensHash[j] });
      data = { kind: "stored", parentHash: flags[i] & 1 ? parent[i] : null, blocks };
    } else if (k === "removed")
      data = { kind: "removed", blockHashes: Array.from(hashes.subarray(begin[i], end[i])) };
    else data = { kind: "cleared" };
    records.push({
      dynamoWorker: worker[i].toString(),
      dpRank: dpRank[i],
      tier: TIERS[tier[i]],
      storageTier: storageTiers[name[i]],
      eventId: wire(eventId[i], (flags[i] & 2) !== 0),
      data,
    });
  }
  return {
    publisherId: wire(head[0], (head[2] & 1n) !== 0n),
    sequence: wire(head[1], (head[2] & 2n) !== 0n),
    records,
  };
}
