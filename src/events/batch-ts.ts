// The publish time of a KV-event batch, read from the first bytes of its msgpack payload without
// decoding the rest: [ts, events, dp_rank] (an array whose first element is ts) or a map whose first
// key is "ts". SGLang stamps each batch with time.time() when it builds it, so within one process
// a later batch never has an earlier ts; a batch numbered below what was already seen but stamped
// later than everything seen comes from a new process whose sequence started over.

/** The batch's ts (seconds), or null when the payload does not start the way above. */
export function batchTs(p: Uint8Array): number | null {
  let i = headerLength(p);
  if (i === null) return null;
  if (p[0] >= 0x80 && p[0] <= 0x8f) {
    // A map: its first key must be the 2-byte string "ts".
    if (p[i] !== 0xa2 || p[i + 1] !== 0x74 || p[i + 2] !== 0x73) return null;
    i += 3;
  }
  return numberAt(p, i);
}

function headerLength(p: Uint8Array): number | null {
  const b = p[0];
  if (b === undefined) return null;
  if ((b >= 0x91 && b <= 0x9f) || (b >= 0x81 && b <= 0x8f)) return 1;
  if (b === 0xdc) return 3;
  if (b === 0xdd) return 5;
  return null;
}

function numberAt(p: Uint8Array, i: number): number | null {
  const b = p[i];
  if (b === undefined) return null;
  const v = new DataView(p.buffer, p.byteOffset, p.byteLength);
  const room = (n: number) => i + 1 + n <= p.byteLength;
  if (b <= 0x7f) return b;
  if (b === 0xcb && room(8)) return v.getFloat64(i + 1);
  if (b === 0xca && room(4)) return v.getFloat32(i + 1);
  if (b === 0xcc && room(1)) return v.getUint8(i + 1);
  if (b === 0xcd && room(2)) return v.getUint16(i + 1);
  if (b === 0xce && room(4)) return v.getUint32(i + 1);
  if (b === 0xcf && room(8)) return Number(v.getBigUint64(i + 1));
  return null;
}
