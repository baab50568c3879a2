// Numbers as the report prints them. Locale-free on purpose: `toLocaleString` follows the host's
// ICU data, and a report of a fixed result must be the same bytes on every machine.

/** Text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

function groupThousands(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** `x` with `decimals` places and thousands grouped: 1234567.8 -> "1,234,567.8". */
export function fixed(x: number, decimals: number): string {
  const [int, frac] = Math.abs(x).toFixed(decimals).split(".");
  return (x < 0 ? "-" : "") + groupThousands(int) + (frac === undefined ? "" : `.${frac}`);
}

/** A count: a whole number, grouped. */
export function count(x: number): string {
  return fixed(x, 0);
}

/** Milliseconds: one decimal below 100 ms, whole above. */
export function ms(x: number): string {
  return fixed(x, Math.abs(x) < 100 ? 1 : 0);
}

/** A figure of no fixed scale (GPU-seconds, programs per hour): three significant digits. */
export function sig3(x: number): string {
  if (x === 0) return "0";
  const decimals = Math.max(0, 2 - Math.floor(Math.log10(Math.abs(x))));
  return fixed(x, decimals);
}

/** A ratio to the oracle: "1.23x"; `null` (no oracle figure to divide by) prints as a dash. */
export function ratio(x: number | null): string {
  return x === null ? "—" : `${x.toFixed(2)}x`;
}

/** `value / bound`, or null when the bound is zero and the value is not. */
export function ratioTo(value: number, bound: number): number | null {
  if (bound === 0) return value === 0 ? 1 : null;
  return value / bound;
}

const SI = [
  [1e12, "T"],
  [1e9, "G"],
  [1e6, "M"],
  [1e3, "k"],
] as const;

/** An axis tick: 250000000 -> "250M", 1500 -> "1.5k", 0.25 -> "0.25". */
export function short(x: number): string {
  const a = Math.abs(x);
  for (const [scale, suffix] of SI) {
    if (a >= scale) return `${trimZeros((x / scale).toFixed(1))}${suffix}`;
  }
  return trimZeros(x.toFixed(a >= 10 ? 0 : 2));
}

function trimZeros(text: string): string {
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

const BYTE_UNITS = [
  [2 ** 40, "TiB"],
  [2 ** 30, "GiB"],
  [2 ** 20, "MiB"],
  [2 ** 10, "KiB"],
] as const;

/** The binary unit a chart of byte counts up to `max` is drawn in. */
export function byteUnit(max: number): { unit: string; divisor: number } {
  for (const [divisor, unit] of BYTE_UNITS) if (max >= divisor) return { unit, divisor };
  return { unit: "B", divisor: 1 };
}
