// Signed 64-bit block hashes. JavaScript numbers lose precision past 2^53, so a hash is a `bigint`
// in memory; this file is the single place that decides what counts as a valid int64.

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

const DECIMAL = /^-?(0|[1-9][0-9]*)$/;

/**
 * Converts a decoded JSON value to an int64, or returns a reason why it is not one. Accepts a
 * bigint, an integer `number` that is exactly representable (never a rounded one) and a decimal
 * string. Anything else is refused: nothing is ever rounded or truncated.
 */
export function toInt64(value: unknown): bigint | string {
  let v: bigint;
  if (typeof value === "bigint") v = value;
  else if (typeof value === "number") {
    if (!Number.isInteger(value)) return `expected an int64, got ${value}`;
    // Past 2^53 a double may already be the rounded image of another literal: refuse it.
    if (!Number.isSafeInteger(value))
      return `integer ${value} is not exact as a double; send it as a JSON integer literal or a decimal string`;
    v = BigInt(value);
  } else if (typeof value === "string") {
    if (!DECIMAL.test(value))
      return `expected a decimal int64 string, got ${JSON.stringify(value.slice(0, 40))}`;
    v = BigInt(value);
  } else return `expected an int64, got ${value === null ? "null" : typeof value}`;
  if (v < INT64_MIN || v > INT64_MAX) return `${v} is outside the signed 64-bit range`;
  return v;
}

export function isInt64(value: bigint): boolean {
  return value >= INT64_MIN && value <= INT64_MAX;
}
