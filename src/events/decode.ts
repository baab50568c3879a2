// Decoding of KV event batches from the wire (msgpack payload of frame 3), for tools and
// listeners that want the events as objects. There is one decoder, the addon's
// (native/events: a bounded msgpack reader and one adapter per engine form); this turns its
// columns into engine-neutral events. The index does not come through here: it applies frames
// natively (src/index/native.ts).
//
// Accepted shapes:
//   batch : [ts, events, dp_rank] (SGLang and vLLM; 2 elements on the oldest vLLM) or a map
//           {ts, events, attn_dp_rank | data_parallel_rank | dp_rank}
//   event : a tagged map {"type": "BlockStored", block_hashes, parent_block_hash, token_ids, ...}
//           (SGLang 0.5.23 and vLLM >= PR #42892; optional fields omitted when None), or a
//           positional array ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, x]
//           where x is SGLang's metadata map {cache_salt, session_id} or vLLM's lora_name string.
// Hashes arrive as msgpack uint64 or int64; both are normalised to signed 64-bit bigint.
// Validation is per event and complete before anything is returned: a bad event is reported in
// `bad` and left out, the rest of the batch stands.
import { columnsToBatch, decodeBatchColumns } from "./native.js";
import { BatchDecodeError, type DecodedBatch } from "./types.js";

export { BatchDecodeError };

/** msgpack payload -> decoded batch. Throws BatchDecodeError for an undecodable payload. */
export function decodeBatch(payload: Uint8Array): DecodedBatch {
  return columnsToBatch(decodeBatchColumns(payload, true));
}

/** The batch's publish time (seconds), or null when the payload does not decode as a batch. */
export function batchTs(payload: Uint8Array): number | null {
  try {
    return decodeBatchColumns(payload).ts;
  } catch (e) {
    if (!(e instanceof BatchDecodeError)) throw e;
    return null;
  }
}

/** The seq frame: 8 bytes big-endian. Returns a signed bigint (END_SEQ reads as -1). */
export function decodeSeq(frame: Uint8Array): bigint {
  if (frame.length !== 8)
    throw new BatchDecodeError(`seq frame has ${frame.length} bytes, expected 8`, "shape");
  return Buffer.from(frame.buffer, frame.byteOffset, 8).readBigInt64BE(0);
}

export function encodeSeq(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(BigInt.asIntN(64, seq));
  return b;
}

export const END_SEQ = -1n;
