// msgpack encoding of KV event batches, byte-for-byte as SGLang 0.5.23's publisher writes them
// (msgspec.msgpack.Encoder over KVEventBatch): the batch is a positional array
// [ts (always float64), events, attn_dp_rank]; each event is a map whose first key is "type"
// (the class name), then the struct's fields in declaration order, where the fields that default
// to None are left out when None (omit_defaults) and the required ones (parent_block_hash,
// lora_id) are always written; ints use the smallest msgpack int form, as msgspec does.
// A small dedicated writer rather than a generic packer: a generic one writes an integral float
// (ts = 1700000000.0) as an int and cannot be told which fields to omit.
import type { KvEvent, KvEventBatch } from "./types.js";

class Writer {
  buf = Buffer.allocUnsafe(4096);
  len = 0;
  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }
  byte(b: number): void {
    this.ensure(1);
    this.buf[this.len++] = b;
  }
  nil(): void {
    this.byte(0xc0);
  }
  float64(x: number): void {
    this.ensure(9);
    this.buf[this.len] = 0xcb;
    this.buf.writeDoubleBE(x, this.len + 1);
    this.len += 9;
  }
  int(x: number | bigint): void {
    this.ensure(9);
    const b = this.buf;
    let o = this.len;
    if (typeof x === "number" && Number.isSafeInteger(x)) {
      if (x >= 0) {
        if (x < 128) b[o++] = x;
        else if (x < 0x100) {
          b[o++] = 0xcc;
          b[o++] = x;
        } else if (x < 0x10000) {
          b[o++] = 0xcd;
          b.writeUInt16BE(x, o);
          o += 2;
        } else if (x < 0x100000000) {
          b[o++] = 0xce;
          b.writeUInt32BE(x, o);
          o += 4;
        } else {
          b[o++] = 0xcf;
          b.writeBigUInt64BE(BigInt(x), o);
          o += 8;
        }
      } else {
        if (x >= -32) b[o++] = x & 0xff;
        else if (x >= -128) {
          b[o++] = 0xd0;
          b.writeInt8(x, o);
          o += 1;
        } else if (x >= -32768) {
          b[o++] = 0xd1;
          b.writeInt16BE(x, o);
          o += 2;
        } else if (x >= -2147483648) {
          b[o++] = 0xd2;
          b.writeInt32BE(x, o);
          o += 4;
        } else {
          b[o++] = 0xd3;
          b.writeBigInt64BE(BigInt(x), o);
          o += 8;
        }
      }
      this.len = o;
      return;
    }
    const v = BigInt(x);
    if (v >= -(1n << 31n) && v < 1n << 32n) {
      this.int(Number(v));
      return;
    }
    if (v >= 0n) {
      b[o++] = 0xcf;
      b.writeBigUInt64BE(v, o);
    } else {
      b[o++] = 0xd3;
      b.writeBigInt64BE(v, o);
    }
    this.len = o + 8;
  }
  str(s: string): void {
    const n = Buffer.byteLength(s);
    this.ensure(n + 5);
    if (n < 32) this.buf[this.len++] = 0xa0 | n;
    else if (n < 0x100) {
      this.buf[this.len++] = 0xd9;
      this.buf[this.len++] = n;
    } else if (n < 0x10000) {
      this.buf[this.len++] = 0xda;
      this.buf.writeUInt16BE(n, this.len);
      this.len += 2;
    } else {
      this.buf[this.len++] = 0xdb;
      this.buf.writeUInt32BE(n, this.len);
      this.len += 4;
    }
    this.len += this.buf.write(s, this.len);
  }
  array(n: number): void {
    this.header(n, 0x90, 0xdc, 0xdd);
  }
  map(n: number): void {
    this.header(n, 0x80, 0xde, 0xdf);
  }
  private header(n: number, fix: number, h16: number, h32: number): void {
    this.ensure(5);
    if (n < 16) this.buf[this.len++] = fix | n;
    else if (n < 0x10000) {
      this.buf[this.len++] = h16;
      this.buf.writeUInt16BE(n, this.len);
      this.len += 2;
    } else {
      this.buf[this.len++] = h32;
      this.buf.writeUInt32BE(n, this.len);
      this.len += 4;
    }
  }
  optInt(x: number | bigint | null): void {
    if (x === null) this.nil();
    else this.int(x);
  }
  done(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.len));
  }
}

function writeEvent(w: Writer, e: KvEvent): void {
  if (e.type === "AllBlocksCleared") {
    w.map(1);
    w.str("type");
    w.str("AllBlocksCleared");
    return;
  }
  if (e.type === "BlockRemoved") {
    w.map(e.medium === null ? 2 : 3);
    w.str("type");
    w.str("BlockRemoved");
    w.str("block_hashes");
    w.array(e.blockHashes.length);
    for (const h of e.blockHashes) w.int(h);
    if (e.medium !== null) {
      w.str("medium");
      w.str(e.medium);
    }
    return;
  }
  const optional: [string, string | null][] = [
    ["medium", e.medium],
    ["cache_salt", e.cacheSalt],
    ["session_id", e.sessionId],
    ["lora_name", e.loraName],
  ];
  const present = optional.filter(([, v]) => v !== null);
  w.map(6 + present.length);
  w.str("type");
  w.str("BlockStored");
  w.str("block_hashes");
  w.array(e.blockHashes.length);
  for (const h of e.blockHashes) w.int(h);
  w.str("parent_block_hash");
  w.optInt(e.parentBlockHash);
  w.str("token_ids");
  if (e.bigram) {
    w.array(e.tokenIds.length / 2);
    for (let i = 0; i < e.tokenIds.length; i += 2) {
      w.array(2);
      w.int(e.tokenIds[i]);
      w.int(e.tokenIds[i + 1]);
    }
  } else {
    w.array(e.tokenIds.length);
    for (const t of e.tokenIds) w.int(t);
  }
  w.str("block_size");
  w.int(e.blockSize);
  w.str("lora_id");
  w.optInt(e.loraId);
  for (const [k, v] of present) {
    w.str(k);
    w.str(v as string);
  }
}

/** Encodes a batch exactly as SGLang 0.5.23's msgspec encoder does. */
export function encodeBatch(batch: KvEventBatch): Buffer {
  const w = new Writer();
  w.array(3);
  w.float64(batch.ts);
  w.array(batch.events.length);
  for (const e of batch.events) writeEvent(w, e);
  w.optInt(batch.dpRank);
  return w.done();
}
