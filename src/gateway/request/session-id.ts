// Where a request's session id comes from, first match wins: the headers agents and routers send
// (ours, Dynamo's, Claude Code's, a plain one), then the body fields SGLang, OpenAI and Anthropic
// define. No match: the request is sessionless and gets block-level decisions only.
import type { IncomingHttpHeaders } from "node:http";

export const SESSION_HEADERS = [
  "x-session-id",
  "x-dynamo-session-id",
  "x-claude-code-session-id",
  "session-id",
] as const;

export interface SessionIdSource {
  id: string;
  /** The header or body field it came from, for logs and metrics. */
  from: string;
}

/** Longest session id accepted (bytes of UTF-8); longer ones are a 400 naming the field. */
export const MAX_SESSION_ID_BYTES = 512;

export class SessionIdError extends Error {
  override name = "SessionIdError";
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

function check(id: string, from: string): SessionIdSource {
  if (Buffer.byteLength(id) > MAX_SESSION_ID_BYTES)
    throw new SessionIdError(from, `${from} is longer than ${MAX_SESSION_ID_BYTES} bytes`);
  return { id, from };
}

export function sessionIdOf(
  headers: IncomingHttpHeaders,
  body: Record<string, unknown> | null,
): SessionIdSource | null {
  for (const h of SESSION_HEADERS) {
    const v = headers[h];
    const s = Array.isArray(v) ? v[0] : v;
    if (typeof s === "string" && s.trim() !== "") return check(s.trim(), `header ${h}`);
  }
  if (!body) return null;
  // A JSON value: reading a field of anything but an object gives undefined.
  const metadata = body.metadata as { user_id?: unknown } | null | undefined;
  const fields: [string, unknown][] = [
    ["session_id", body.session_id],
    ["prompt_cache_key", body.prompt_cache_key],
    ["metadata.user_id", metadata?.user_id],
  ];
  for (const [name, v] of fields) {
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") throw new SessionIdError(name, `${name} must be a string`);
    if (v !== "") return check(v, name);
  }
  return null;
}
