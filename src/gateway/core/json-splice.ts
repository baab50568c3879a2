// The one way a field is added to a client's body without re-serialising it: spliced into the
// bytes the client sent.

const CLOSE = 0x7d; // }
const OPEN = 0x7b; // {
const COMMA = Buffer.from(",");

/**
 * `raw` (a JSON object's bytes, checked when the request was read) with `"key":value` added before
 * its closing brace: the client's bytes stay as sent, only the field is new. Spliced as bytes, so a
 * body is neither decoded nor re-encoded on its way to the worker.
 */
export function withField(raw: Buffer, key: string, value: unknown): Buffer {
  return withFieldBytes(raw, fieldBytes(key, value));
}

/** `"key":value` as bytes, for a field added to many bodies (encoded once). */
export function fieldBytes(key: string, value: unknown): Buffer {
  return Buffer.from(`${JSON.stringify(key)}:${JSON.stringify(value)}`, "utf8");
}

/** withField with the field already encoded (fieldBytes). */
export function withFieldBytes(raw: Buffer, field: Buffer): Buffer {
  const end = raw.lastIndexOf(CLOSE);
  const head = raw.subarray(0, end);
  return Buffer.concat(
    onlyOpens(head) ? [head, field, raw.subarray(end)] : [head, COMMA, field, raw.subarray(end)],
  );
}

/** Whether bytes are an opening brace with only JSON whitespace around it (an empty object so far). */
function onlyOpens(head: Buffer): boolean {
  let seen = false;
  for (const c of head) {
    if (c === OPEN && !seen) seen = true;
    else if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
  }
  return seen;
}
