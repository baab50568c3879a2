// The envelope encoder straight to UTF-8 bytes: the same text as encodeEnvelope/stringifyJson,
// written into a scratch buffer instead of built as a string and then encoded (building a long
// string by concatenation and flattening it cost more than producing the JSON itself).
// test/protocol-codec.test.ts checks it byte-for-byte against the string encoder.
import type { Ack } from "./ack.js";
import type { Envelope } from "./envelope.js";
import { INT64_MAX, INT64_MIN } from "./int64.js";
import { stringifyJson } from "./json.js";

const i64 = new BigInt64Array(1);
const u32 = new Uint32Array(i64.buffer);
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const LO = LITTLE ? 0 : 1;
const HI = LITTLE ? 1 : 0;
const TWO32 = 4294967296;
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
  uint(v: number, minDigits = 1): void {
    this.reserve(17);
    const b = this.buf;
    let digits = 1;
    for (let p = 10; p <= v && digits < 16; p *= 10) digits++;
    if (digits < minDigits) digits = minDigits;
    let n = this.n + digits;
    this.n = n;
    for (let k = 0; k < digits; k++) {
      const q = Math.floor(v / 10);
      b[--n] = 0x30 + (v - q * 10);
      v = q;
    }
  }

  /** An int64 bigint in decimal, exactly (same arithmetic as int64-decimal.ts). */
  int64(v: bigint): void {
    i64[0] = v;
    let lo = u32[LO]!;
    let hi = u32[HI]!;
    if (hi >= 0x80000000) {
      this.ascii("-");
      lo = (~lo >>> 0) + 1;
      hi = ~hi >>> 0;
      if (lo === TWO32) {
        lo = 0;
        hi = (hi + 1) >>> 0;
      }
    }
    if (hi < 0x200000) return this.uint(hi * TWO32 + lo);
    const hh = Math.floor(hi / 65536);
    const hl = hi - hh * 65536;
    const low = hh * 76710656 + hl * 94967296 + lo;
    const carry = Math.floor(low / 1e8);
    this.uint(hh * 2814749 + hl * 42 + carry);
    this.uint(low - carry * 1e8, 8);
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
        return v >= INT64_MIN && v <= INT64_MAX ? this.int64(v) : this.ascii(v.toString());
      case "number":
        return Number.isSafeInteger(v) && v >= 0 && !Object.is(v, -0) ? this.uint(v) : this.ascii(stringifyJson(v));
      case "boolean":
        return this.ascii(v ? "true" : "false");
      case "object": {
        if (v === null) return this.ascii("null");
        if (Array.isArray(v)) {
          this.ascii("[");
          for (let k = 0; k < v.length; k++) {
            if (k) this.ascii(",");
            this.value(v[k] === undefined ? null : v[k]);
          }
          return this.ascii("]");
        }
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

  take(): Uint8Array {
    // A fresh copy: the NATS client keeps a reference to the payload until it is flushed.
    const out = this.buf.slice(0, this.n);
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
