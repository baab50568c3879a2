// Shape tests for parsed JSON (client bodies and worker answers alike), and the one way a field is
// added to a client's body without re-serialising it.

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** v as an object, or null when it is not one. */
export function objectOf(v: unknown): Record<string, unknown> | null {
  return isObject(v) ? v : null;
}

export function isIntArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => Number.isInteger(x) && x >= 0);
}

/**
 * `raw` (a JSON object's bytes, checked when the request was read) with `"key":value` added before
 * its closing brace: the client's bytes stay as sent, only the field is new.
 */
export function withField(raw: Buffer, key: string, value: unknown): Buffer {
  const text = raw.toString("utf8");
  const end = text.lastIndexOf("}");
  const empty = /^\s*\{\s*$/.test(text.slice(0, end));
  return Buffer.from(`${text.slice(0, end)}${empty ? "" : ","}${JSON.stringify(key)}:${JSON.stringify(value)}${text.slice(end)}`, "utf8");
}
