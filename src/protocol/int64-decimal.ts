// Fast, exact int64 <-> decimal conversion for the codec's hot path (every hash of every command).
// V8's BigInt(string) and bigint.toString() allocate several intermediate bigints per call; here
// the value moves through a shared 8-byte buffer as two 32-bit halves and the decimal arithmetic
// is done in doubles, every intermediate kept below 2^53 so nothing is ever rounded. Digits are
// written as bytes (the byte encoder's form); int64ToDecimal is the same digits as a string.
// test/protocol-codec.test.ts checks both directions against BigInt on edges and random values.

const buf = new ArrayBuffer(8);
const i64 = new BigInt64Array(buf);
const u32 = new Uint32Array(buf);
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const LO = LITTLE ? 0 : 1;
const HI = LITTLE ? 1 : 0;
const TWO32 = 4294967296;

/** "00".."99" as ASCII byte pairs: two digits per division. */
const DIGIT_PAIRS = new Uint8Array(200);
for (let k = 0; k < 100; k++) {
  DIGIT_PAIRS[2 * k] = 0x30 + Math.floor(k / 10);
  DIGIT_PAIRS[2 * k + 1] = 0x30 + (k % 10);
}
const scratch = new Uint8Array(20);

/** Exact decimal text of an int64 bigint (the caller checks the range). */
export function int64ToDecimal(v: bigint): string {
  return String.fromCharCode.apply(
    null,
    scratch.subarray(0, writeInt64(scratch, 0, v)) as unknown as number[],
  );
}

/**
 * Writes int64 `v` in decimal at b[n..] and returns the new end; b has room for 20 bytes. The
 * value moves through an 8-byte buffer as two 32-bit halves and is cut into base-1e8 chunks in
 * doubles, every intermediate below 2^53 (V8's bigint.toString() allocates several bigints).
 */
export function writeInt64(b: Uint8Array, n: number, v: bigint): number {
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
  if (c0 < 0) carry--, (c0 += 1e8);
  else if (c0 >= 1e8) carry++, (c0 -= 1e8);
  const upper = hh * 2814749 + hl * 42 + carry; // m = upper*1e8 + c0, upper < 1e12
  let c2 = Math.floor(upper * 1e-8); // < 1e4
  let c1 = upper - c2 * 1e8;
  if (c1 < 0) c2--, (c1 += 1e8);
  else if (c1 >= 1e8) c2++, (c1 -= 1e8);
  if (c2 > 0) return writeChunk8(b, writeChunk8(b, writeLeading(b, n, c2), c1), c0);
  if (c1 > 0) return writeChunk8(b, writeLeading(b, n, c1), c0);
  return writeLeading(b, n, c0);
}

/** 0 <= v < 1e8 without leading zeros; returns the new end. */
export function writeLeading(b: Uint8Array, n: number, v: number): number {
  const digits =
    v >= 1e4
      ? v >= 1e6
        ? v >= 1e7
          ? 8
          : 7
        : v >= 1e5
          ? 6
          : 5
      : v >= 100
        ? v >= 1000
          ? 4
          : 3
        : v >= 10
          ? 2
          : 1;
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
export function writeChunk8(b: Uint8Array, n: number, v: number): number {
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
export function int64FromHeadTail(
  head: number,
  scale: number,
  tail: number,
  negative: boolean,
): bigint | null {
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
