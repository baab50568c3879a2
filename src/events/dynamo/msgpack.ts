// A small MessagePack reader for Dynamo's event-plane frames. SGLang's KV events go through the
// native decoder; Dynamo's envelope is a different, smaller shape that this side reads itself.
// 64-bit integers come back as bigint (hashes need every bit), smaller ones as numbers.

export type MsgValue = null | boolean | number | bigint | string | Uint8Array | MsgValue[] | { [k: string]: MsgValue };

export class MsgpackError extends Error {}

const MAX_DEPTH = 32;

export function decodeMsgpack(buf: Uint8Array): MsgValue {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let at = 0;
  const need = (n: number): void => {
    if (at + n > buf.length) throw new MsgpackError(`truncated at byte ${at} (needs ${n} more)`);
  };
  const str = (n: number): string => {
    need(n);
    const s = new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(at, at + n));
    at += n;
    return s;
  };
  const bin = (n: number): Uint8Array => {
    need(n);
    const b = buf.subarray(at, at + n);
    at += n;
    return b;
  };
  const u = (n: 1 | 2 | 4): number => {
    need(n);
    const v = n === 1 ? view.getUint8(at) : n === 2 ? view.getUint16(at) : view.getUint32(at);
    at += n;
    return v;
  };
  const read = (depth: number): MsgValue => {
    if (depth > MAX_DEPTH) throw new MsgpackError("nested too deep");
    const b = u(1);
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f, depth);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f, depth);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return bin(u(1));
      case 0xc5:
        return bin(u(2));
      case 0xc6:
        return bin(u(4));
      case 0xca: {
        need(4);
        const v = view.getFloat32(at);
        at += 4;
        return v;
      }
      case 0xcb: {
        need(8);
        const v = view.getFloat64(at);
        at += 8;
        return v;
      }
      case 0xcc:
        return u(1);
      case 0xcd:
        return u(2);
      case 0xce:
        return u(4);
      case 0xcf: {
        need(8);
        const v = view.getBigUint64(at);
        at += 8;
        return v;
      }
      case 0xd0:
        need(1);
        return view.getInt8(at++);
      case 0xd1: {
        need(2);
        const v = view.getInt16(at);
        at += 2;
        return v;
      }
      case 0xd2: {
        need(4);
        const v = view.getInt32(at);
        at += 4;
        return v;
      }
      case 0xd3: {
        need(8);
        const v = view.getBigInt64(at);
        at += 8;
        return v;
      }
      case 0xd9:
        return str(u(1));
      case 0xda:
        return str(u(2));
      case 0xdb:
        return str(u(4));
      case 0xdc:
        return arr(u(2), depth);
      case 0xdd:
        return arr(u(4), depth);
      case 0xde:
        return map(u(2), depth);
      case 0xdf:
        return map(u(4), depth);
      default:
        throw new MsgpackError(`unsupported type byte 0x${b.toString(16)} at ${at - 1}`);
    }
  };
  const arr = (n: number, depth: number): MsgValue[] => {
    if (n > buf.length - at) throw new MsgpackError(`array of ${n} longer than the frame`);
    const out: MsgValue[] = [];
    for (let i = 0; i < n; i++) out.push(read(depth + 1));
    return out;
  };
  const map = (n: number, depth: number): { [k: string]: MsgValue } => {
    if (n > buf.length - at) throw new MsgpackError(`map of ${n} longer than the frame`);
    const out: { [k: string]: MsgValue } = Object.create(null);
    for (let i = 0; i < n; i++) {
      const k = read(depth + 1);
      if (typeof k !== "string") throw new MsgpackError("map key is not a string");
      out[k] = read(depth + 1);
    }
    return out;
  };
  const v = read(0);
  if (at !== buf.length) throw new MsgpackError(`${buf.length - at} trailing byte(s)`);
  return v;
}
