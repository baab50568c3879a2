// A small MessagePack reader for Dynamo's event-plane frames. SGLang's KV events go through the
// native decoder; Dynamo's envelope is a different, smaller shape that this side reads itself.
// 64-bit integers come back as bigint (hashes need every bit), smaller ones as numbers.

export type MsgValue = null | boolean | number | bigint | string | Uint8Array | MsgValue[] | { [k: string]: MsgValue };

export class MsgpackError extends Error {}

const MAX_DEPTH = 32;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Fixed-width scalars by type byte: [bytes, read at offset]. */
const SCALARS = new Map<number, [number, (v: DataView, at: number) => number | bigint]>([
  [0xca, [4, (v, at) => v.getFloat32(at)]],
  [0xcb, [8, (v, at) => v.getFloat64(at)]],
  [0xcc, [1, (v, at) => v.getUint8(at)]],
  [0xcd, [2, (v, at) => v.getUint16(at)]],
  [0xce, [4, (v, at) => v.getUint32(at)]],
  [0xcf, [8, (v, at) => v.getBigUint64(at)]],
  [0xd0, [1, (v, at) => v.getInt8(at)]],
  [0xd1, [2, (v, at) => v.getInt16(at)]],
  [0xd2, [4, (v, at) => v.getInt32(at)]],
  [0xd3, [8, (v, at) => v.getBigInt64(at)]],
]);

/** Length-prefixed types by type byte: [kind, width of the length]. */
const SIZED = new Map<number, ["bin" | "str" | "arr" | "map", 1 | 2 | 4]>([
  [0xc4, ["bin", 1]],
  [0xc5, ["bin", 2]],
  [0xc6, ["bin", 4]],
  [0xd9, ["str", 1]],
  [0xda, ["str", 2]],
  [0xdb, ["str", 4]],
  [0xdc, ["arr", 2]],
  [0xdd, ["arr", 4]],
  [0xde, ["map", 2]],
  [0xdf, ["map", 4]],
]);

class Reader {
  private at = 0;
  private readonly view: DataView;

  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  done(): void {
    if (this.at !== this.buf.length) throw new MsgpackError(`${this.buf.length - this.at} trailing byte(s)`);
  }

  private need(n: number): void {
    if (this.at + n > this.buf.length) throw new MsgpackError(`truncated at byte ${this.at} (needs ${n} more)`);
  }

  private uint(n: 1 | 2 | 4): number {
    this.need(n);
    const v = n === 1 ? this.view.getUint8(this.at) : n === 2 ? this.view.getUint16(this.at) : this.view.getUint32(this.at);
    this.at += n;
    return v;
  }

  private bytes(n: number): Uint8Array {
    this.need(n);
    const b = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return b;
  }

  read(depth = 0): MsgValue {
    if (depth > MAX_DEPTH) throw new MsgpackError("nested too deep");
    const b = this.uint(1);
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return this.map(b & 0x0f, depth);
    if ((b & 0xf0) === 0x90) return this.arr(b & 0x0f, depth);
    if ((b & 0xe0) === 0xa0) return utf8.decode(this.bytes(b & 0x1f));
    if (b === 0xc0) return null;
    if (b === 0xc2 || b === 0xc3) return b === 0xc3;
    const scalar = SCALARS.get(b);
    if (scalar) {
      this.need(scalar[0]);
      const v = scalar[1](this.view, this.at);
      this.at += scalar[0];
      return v;
    }
    const sized = SIZED.get(b);
    if (!sized) throw new MsgpackError(`unsupported type byte 0x${b.toString(16)} at ${this.at - 1}`);
    const n = this.uint(sized[1]);
    if (sized[0] === "bin") return this.bytes(n);
    if (sized[0] === "str") return utf8.decode(this.bytes(n));
    return sized[0] === "arr" ? this.arr(n, depth) : this.map(n, depth);
  }

  private arr(n: number, depth: number): MsgValue[] {
    if (n > this.buf.length - this.at) throw new MsgpackError(`array of ${n} longer than the frame`);
    const out: MsgValue[] = [];
    for (let i = 0; i < n; i++) out.push(this.read(depth + 1));
    return out;
  }

  private map(n: number, depth: number): { [k: string]: MsgValue } {
    if (n > this.buf.length - this.at) throw new MsgpackError(`map of ${n} longer than the frame`);
    const out: { [k: string]: MsgValue } = Object.create(null);
    for (let i = 0; i < n; i++) {
      const k = this.read(depth + 1);
      if (typeof k !== "string") throw new MsgpackError("map key is not a string");
      out[k] = this.read(depth + 1);
    }
    return out;
  }
}

export function decodeMsgpack(buf: Uint8Array): MsgValue {
  const r = new Reader(buf);
  let v: MsgValue;
  try {
    v = r.read();
  } catch (e) {
    if (e instanceof TypeError) throw new MsgpackError(`bad UTF-8 in a string: ${e.message}`);
    throw e;
  }
  r.done();
  return v;
}
