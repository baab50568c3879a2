// Fast, exact int64 <-> decimal conversion for the codec's hot path (every hash of every command).
// V8's BigInt(string) and bigint.toString() allocate several intermediate bigints per call; here
// the value moves through a shared 8-byte buffer as two 32-bit halves and the decimal arithmetic
// is done in doubles, every intermediate kept below 2^53 so nothing is ever rounded.
// test/protocol-codec.test.ts checks both directions against BigInt on edges and random values.

const buf = new ArrayBuffer(8);
const i64 = new BigInt64Array(buf);
const u32 = new Uint32Array(buf);
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const LO = LITTLE ? 0 : 1;
const HI = LITTLE ? 1 : 0;
const TWO32 = 4294967296;

// 2^32 = 42 * 1e8 + 94967296;  2^48 = 2814749 * 1e8 + 76710656;  1e15 = 232830 * 2^32 + 2764472320
const PAD8 = ["", "0", "00", "000", "0000", "00000", "000000", "0000000"];

/** Exact decimal text of an int64 bigint (the caller checks the range). */
export function int64ToDecimal(v: bigint): string {
  i64[0] = v;
  let lo = u32[LO]!;
  let hi = u32[HI]!;
  const negative = hi >= 0x80000000;
  if (negative) {
    // Two's complement magnitude: ~x + 1 on the 64-bit pair.
    lo = (~lo >>> 0) + 1;
    hi = ~hi >>> 0;
    if (lo === TWO32) {
      lo = 0;
      hi = (hi + 1) >>> 0;
    }
  }
  if (hi < 0x200000) {
    // Below 2^53: one exact double.
    const n = hi * TWO32 + lo;
    return negative ? "-" + n : String(n);
  }
  // Base 1e8: m = hh*2^48 + hl*2^32 + lo, every product below 2^53.
  const hh = Math.floor(hi / 65536);
  const hl = hi - hh * 65536;
  const low = hh * 76710656 + hl * 94967296 + lo;
  const carry = Math.floor(low / 1e8);
  const d0 = low - carry * 1e8;
  const upper = hh * 2814749 + hl * 42 + carry;
  const tail = String(d0);
  return (negative ? "-" : "") + upper + PAD8[8 - tail.length] + tail;
}

const E15_HI = 232830; // floor(1e15 / 2^32)
const E15_LO = 2764472320; // 1e15 mod 2^32

/**
 * The int64 written by 16-19 decimal digits, given as `hi` (the digits before the last 15) and
 * `lo` (the last 15), or null if the magnitude is outside int64 (the caller then keeps it exact
 * another way, to report it).
 */
export function int64FromDecimalParts(hi: number, lo: number, negative: boolean): bigint | null {
  // m = hi*1e15 + lo = (hi*E15_HI + loHigh + carry) * 2^32 + low32
  const loHigh = Math.floor(lo / TWO32);
  const loLow = lo - loHigh * TWO32;
  const t = hi * E15_LO + loLow; // < 9999 * 2^32 + 2^32 < 2^53
  const carry = Math.floor(t / TWO32);
  const low32 = t - carry * TWO32;
  const high32 = hi * E15_HI + loHigh + carry;
  return fromHalves(high32, low32, negative);
}

/**
 * The int64 `head * scale + tail` where `head` < 10^15, `scale` = 10^k (k <= 4) and
 * `tail` < scale: the parser's one-pass split of a 16-19 digit literal. Null if outside int64.
 */
export function int64FromHeadTail(head: number, scale: number, tail: number, negative: boolean): bigint | null {
  const headHi = Math.floor(head / TWO32); // < 2^18
  const headLo = head - headHi * TWO32;
  const low = headLo * scale + tail; // < 2^32 * 10^4 + 10^4 < 2^46
  const carry = Math.floor(low / TWO32);
  return fromHalves(headHi * scale + carry, low - carry * TWO32, negative);
}

/** Writes magnitude (high32, low32) with a sign into the shared buffer; null past int64. */
function fromHalves(high32: number, low32: number, negative: boolean): bigint | null {
  if (high32 > 0x80000000 || (high32 === 0x80000000 && (low32 !== 0 || !negative))) return null;
  if (!negative) {
    u32[LO] = low32;
    u32[HI] = high32;
    return i64[0]!;
  }
  // Negate into two's complement: ~m + 1.
  let nlo = (~low32 >>> 0) + 1;
  let nhi = ~high32 >>> 0;
  if (nlo === TWO32) {
    nlo = 0;
    nhi = (nhi + 1) >>> 0;
  }
  u32[LO] = nlo;
  u32[HI] = nhi;
  return i64[0]!;
}
