// Shape tests for parsed JSON (client bodies and worker answers alike). Adding a field to a
// client's body without re-serialising it is json-splice.ts.

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
