// The envelope encoder straight to UTF-8 bytes: the same text as encodeEnvelope/stringifyJson,
// written into a scratch buffer instead of built as a string and then encoded (building a long
// string by concatenation and flattening it cost more than producing the JSON itself).
// test/protocol-codec.test.ts checks it byte-for-byte against the string encoder.
import type { Ack } from "./ack.js";
import type { Envelope } from "./envelope.js";
import { INT64_MAX, INT64_MIN } from "./int64.js";
import { writeChunk8 as chunk8, writeInt64, writeLeading as lead } from "./int64-decimal.js";
import { stringifyJson } from "./json.js";
// Module-local copies: the hot loops read them per hash, and a bundler may turn an imported
// binding into a getter call.
const MIN = INT64_MIN;
const MAX = INT64_MAX;

const textEncoder = new TextEncoder();

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
        return Number.isSafeInteger(v) && v >= 0 && !Object.is(v, -0)
          ? this.uint(v)
          : this.ascii(stringifyJson(v));
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
const ACK_KEYS = new Set([
  "id",
  "worker_id",
  "type",
  "status",
  "requested",
  "affected",
  "skipped",
  "missing",
  "reason",
  "tiers",
  "lease",
  "epoch",
  "elapsed_us",
]);
