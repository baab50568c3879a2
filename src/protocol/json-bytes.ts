// The envelope encoder straight to UTF-8 bytes: the same text as encodeEnvelope/stringifyJson,
// written into a scratch buffer instead of built as a string and then encoded (building a long
// string by concatenation and flattening it cost more than producing the JSON itself).
// test/protocol-codec.test.ts checks it byte-for-byte against the string encoder.
import type { Ack } from "./ack.js";
import type { Envelope } from "./envelope.js";
import { INT64_MAX, INT64_MIN } from "./int64.js";
import { stringifyJson } from "./json.js";
// Module-local copies: the hot loops read them per hash, and a bundler may turn an imported
// binding into a getter call.
const MIN = INT64_MIN;
const MAX = INT64_MAX;

const i64 = new BigInt64Array(1);
const u32 = new Uint32Array(i64.buffer);
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const LO = LITTLE ? 0 : 1;
const HI = LITTLE ? 1 : 0;
const TWO32 = 4294967296;
const textEncoder = new TextEncoder();
/** "00".."99" as ASCII byte pairs: two digits per division. */
const DIGIT_PAIRS = new Uint8Array(200);
for (let k = 0; k < 100; k++) {
  DIGIT_PAIRS[2 * k] = 0x30 + Math.floor(k / 10);
  DIGIT_PAIRS[2 * k + 1] = 0x30 + (k % 10);
}

/**
 * Writes int64 `v` in decimal at b[n..] and returns the new end; b has room for 20 bytes. The
 * value moves through an 8-byte buffer as two 32-bit halves and is cut into base-1e8 chunks in
 * doubles, every intermediate below 2^53 (V8's bigint.toString() allocates several bigints).
 */
function writeInt64(b: Uint8Array, n: number, v: bigint): number {
  i64[0] = v;
  let lo = u32[LO]!;
  let hi = u32[HI]!;
  if (hi >= 0x80000000) {
    b[n++] = 0x2d; // '-': two's complement magnitude, ~x + 1 on the pair
    lo = (~lo >>> 0) + 1;
    hi = ~hi >>> 0;
    if (lo === TWO32) {
      lo = 0;
      hi = (hi + 1) >>> 0;
    }
  }
  // m = hh*2^48 + hl*2^32 + lo;  2^48 = 2814749*1e8 + 76710656;  2^32 = 42*1e8 + 94967296
  const hh = hi >>> 16;
  const hl = hi & 0xffff;
  const low = hh * 76710656 + hl * 94967296 + lo; // < 2^47
  // Quotients by 1e8 as a multiply plus a one-step fix (a division costs several multiplies).
  let carry = Math.floor(low * 1e-8);
  let c0 = low - carry * 1e8;
  if (c0 < 0) (carry--, (c0 += 1e8));
  else if (c0 >= 1e8) (carry++, (c0 -= 1e8));
  const upper = hh * 2814749 + hl * 42 + carry; // m = upper*1e8 + c0, upper < 1e12
  let c2 = Math.floor(upper * 1e-8); // < 1e4
  let c1 = upper - c2 * 1e8;
  if (c1 < 0) (c2--, (c1 += 1e8));
  else if (c1 >= 1e8) (c2++, (c1 -= 1e8));
  if (c2 > 0) return chunk8(b, chunk8(b, lead(b, n, c2), c1), c0);
  if (c1 > 0) return chunk8(b, lead(b, n, c1), c0);
  return lead(b, n, c0);
}

/** 0 <= v < 1e8 without leading zeros; returns the new end. */
function lead(b: Uint8Array, n: number, v: number): number {
  const digits = v >= 1e4 ? (v >= 1e6 ? (v >= 1e7 ? 8 : 7) : v >= 1e5 ? 6 : 5) : v >= 100 ? (v >= 1000 ? 4 : 3) : v >= 10 ? 2 : 1;
  const end = n + digits;
  let e = end;
  let x = v | 0;
  while (x >= 100) {
    const q = (x / 100) | 0;
    const r = (x - q * 100) << 1;
    b[--e] = DIGIT_PAIRS[r + 1]!;
    b[--e] = DIGIT_PAIRS[r]!;
    x = q;
  }
  if (x >= 10) {
    b[--e] = DIGIT_PAIRS[(x << 1) + 1]!;
    b[--e] = DIGIT_PAIRS[x << 1]!;
  } else b[--e] = 0x30 + x;
  return end;
}

/** 0 <= v < 1e8 as exactly 8 digits (zero padded); returns the new end. */
function chunk8(b: Uint8Array, n: number, v: number): number {
  const x = v | 0;
  const hi4 = (x / 10000) | 0;
  const lo4 = x - hi4 * 10000;
  const a = (hi4 / 100) | 0;
  const c = (lo4 / 100) | 0;
  const ai = a << 1;
  const bi = (hi4 - a * 100) << 1;
  const ci = c << 1;
  const di = (lo4 - c * 100) << 1;
  b[n] = DIGIT_PAIRS[ai]!;
  b[n + 1] = DIGIT_PAIRS[ai + 1]!;
  b[n + 2] = DIGIT_PAIRS[bi]!;
  b[n + 3] = DIGIT_PAIRS[bi + 1]!;
  b[n + 4] = DIGIT_PAIRS[ci]!;
  b[n + 5] = DIGIT_PAIRS[ci + 1]!;
  b[n + 6] = DIGIT_PAIRS[di]!;
  b[n + 7] = DIGIT_PAIRS[di + 1]!;
  return n + 8;
}

class ByteWriter {
  buf = new Uint8Array(64 * 1024);
  n = 0;

  reserve(extra: number): void {
    if (this.n + extra <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.n + extra));
    next.set(this.buf.subarray(0, this.n));
    this.buf = next;
  }

  /** A string known to be ASCII (our own punctuation and keys). */
  ascii(s: string): void {
    this.reserve(s.length);
    const b = this.buf;
    let n = this.n;
    for (let k = 0; k < s.length; k++) b[n++] = s.charCodeAt(k);
    this.n = n;
  }

  /** A non-negative integer below 2^53, in decimal. */
  uint(v: number): void {
    this.reserve(17);
    const b = this.buf;
    if (v < 1e8) {
      this.n = lead(b, this.n, v);
      return;
    }
    // Base-1e8 chunks, every one exact: v = a*1e16 + m*1e8 + c.
    const am = Math.floor(v / 1e8);
    const c = v - am * 1e8;
    if (am < 1e8) this.n = chunk8(b, lead(b, this.n, am), c);
    else {
      const a = Math.floor(am / 1e8);
      this.n = chunk8(b, chunk8(b, lead(b, this.n, a), am - a * 1e8), c);
    }
  }

  /** An int64 bigint in decimal, exactly. */
  int64(v: bigint): void {
    this.reserve(20);
    this.n = writeInt64(this.buf, this.n, v);
  }

  /** A JSON string: printable ASCII without quotes or backslashes is copied, anything else escaped. */
  string(s: string): void {
    for (let k = 0; k < s.length; k++) {
      const c = s.charCodeAt(k);
      if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return this.utf8(JSON.stringify(s));
    }
    this.reserve(s.length + 2);
    this.buf[this.n++] = 0x22;
    this.ascii(s);
    this.buf[this.n++] = 0x22;
  }

  utf8(s: string): void {
    this.reserve(s.length * 3);
    this.n += textEncoder.encodeInto(s, this.buf.subarray(this.n)).written;
  }

  value(v: unknown): void {
    switch (typeof v) {
      case "string":
        return this.string(v);
      case "bigint":
        return v >= MIN && v <= MAX ? this.int64(v) : this.ascii(v.toString());
      case "number":
        return Number.isSafeInteger(v) && v >= 0 && !Object.is(v, -0) ? this.uint(v) : this.ascii(stringifyJson(v));
      case "boolean":
        return this.ascii(v ? "true" : "false");
      case "object": {
        if (v === null) return this.ascii("null");
        if (Array.isArray(v)) return this.array(v);
        this.ascii("{");
        let first = true;
        for (const key of Object.keys(v)) {
          const x = (v as Record<string, unknown>)[key];
          if (x === undefined) continue;
          if (!first) this.ascii(",");
          first = false;
          this.string(key);
          this.ascii(":");
          this.value(x);
        }
        return this.ascii("}");
      }
      default:
        // Functions, symbols: refused exactly as the string encoder refuses them.
        stringifyJson(v);
    }
  }

  /** Arrays, with a tight loop for the common case: a list of int64 hashes. */
  array(v: unknown[]): void {
    // Room for every entry as an int64 up front, so the hash loop never checks the capacity.
    this.reserve(21 * v.length + 2);
    const b = this.buf;
    let n = this.n;
    b[n++] = 0x5b; // '['
    for (let k = 0; k < v.length; k++) {
      const x = v[k];
      if (k) b[n++] = 0x2c; // ','
      if (typeof x === "bigint" && x >= MIN && x <= MAX) n = writeInt64(b, n, x);
      else return this.mixedArray(v, k, n);
    }
    b[n++] = 0x5d; // ']'
    this.n = n;
  }

  /** The rest of an array from entry `k` on, once an entry is not an int64 (ours never are). */
  private mixedArray(v: unknown[], k: number, n: number): void {
    this.n = n; // entries before k, and the ',' before entry k, are written
    for (let j = k; j < v.length; j++) {
      if (j > k) this.ascii(",");
      const x = v[j];
      this.value(x === undefined ? null : x);
    }
    this.ascii("]");
  }

  take(): Uint8Array {
    // A fresh copy: the NATS client keeps a reference to the payload until it is flushed.
    // Buffer.allocUnsafe takes small sizes from Node's pool: a new typed array would allocate
    // its own backing store each time, which cost more than writing the JSON.
    const out = Buffer.allocUnsafe(this.n);
    out.set(this.buf.subarray(0, this.n));
    this.n = 0;
    return out;
  }
}

const writer = new ByteWriter();

/** Envelope -> UTF-8 JSON bytes; identical to `TextEncoder.encode(encodeEnvelope(envelope))`. */
export function encodeEnvelopeBytes(envelope: Envelope): Uint8Array {
  writer.n = 0;
  try {
    writer.ascii(`{"version":${envelope.version},"id":`);
    writer.string(envelope.id);
    writer.ascii(`,"issued_at_ms":`);
    writer.value(envelope.issued_at_ms);
    writer.ascii(`,"command":`);
    writer.value(envelope.command);
    writer.ascii("}");
    return writer.take();
  } finally {
    writer.n = 0;
  }
}

/** Ack -> UTF-8 JSON bytes; identical to `TextEncoder.encode(encodeAck(ack))`. */
export function encodeAckBytes(ack: Ack): Uint8Array {
  writer.n = 0;
  try {
    writer.ascii(`{"id":`);
    writer.value(ack.id);
    writer.ascii(`,"worker_id":`);
    writer.string(ack.worker_id);
    writer.ascii(`,"type":`);
    writer.value(ack.type);
    writer.ascii(`,"status":"${ack.status}","requested":`);
    writer.value(ack.requested);
    writer.ascii(`,"affected":`);
    writer.value(ack.affected);
    writer.ascii(`,"skipped":`);
    writer.value(ack.skipped);
    writer.ascii(`,"missing":`);
    writer.value(ack.missing);
    writer.ascii(`,"reason":`);
    writer.value(ack.reason);
    writer.ascii(`,"tiers":`);
    writer.value(ack.tiers);
    writer.ascii(`,"lease":`);
    writer.value(ack.lease);
    writer.ascii(`,"epoch":`);
    writer.value(ack.epoch);
    writer.ascii(`,"elapsed_us":`);
    writer.value(ack.elapsed_us);
    for (const key of Object.keys(ack)) {
      if (ACK_KEYS.has(key)) continue;
      const x = (ack as Record<string, unknown>)[key];
      writer.ascii(",");
      writer.string(key);
      writer.ascii(":");
      writer.value(x);
    }
    writer.ascii("}");
    return writer.take();
  } finally {
    writer.n = 0;
  }
}
const ACK_KEYS = new Set(["id", "worker_id", "type", "status", "requested", "affected", "skipped", "missing", "reason", "tiers", "lease", "epoch", "elapsed_us"]);
