// Byte-exact text handling. Files and patches are decoded as latin1 ("binary"), where every byte
// is exactly one UTF-16 code unit, so string comparison is byte comparison, CR bytes survive as
// '\r', and encoding back with latin1 reproduces the input byte for byte (UTF-8 included).
import { createHash } from "node:crypto";

export const toBin = (buf: Buffer): string => buf.toString("latin1");
export const fromBin = (s: string): Buffer => Buffer.from(s, "latin1");

/** For messages: a binary string shown as UTF-8, with a trailing newline (and CR) made visible. */
export function showLine(s: string): string {
  let t = Buffer.from(s, "latin1").toString("utf8");
  let suffix = "";
  if (t.endsWith("\n")) t = t.slice(0, -1);
  else suffix = " [no newline at end of file]";
  if (t.endsWith("\r")) {
    t = t.slice(0, -1);
    suffix = "\\r" + suffix;
  }
  const clipped = t.length > 120 ? `${t.slice(0, 117)}...` : t;
  return JSON.stringify(clipped + suffix);
}

/** Splits into lines that keep their '\n' terminator; the last line may lack one. */
export function splitLines(s: string): string[] {
  const out: string[] = [];
  let start = 0;
  for (;;) {
    const nl = s.indexOf("\n", start);
    if (nl < 0) break;
    out.push(s.slice(start, nl + 1));
    start = nl + 1;
  }
  if (start < s.length) out.push(s.slice(start));
  return out;
}

export function sha256(data: Buffer | string): string {
  return createHash("sha256")
    .update(typeof data === "string" ? fromBin(data) : data)
    .digest("hex");
}
