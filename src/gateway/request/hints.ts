// Explicit hints from a harness that knows more than the responses show: the body of
// `POST /kvctl/v1/sessions/{id}/events` and the `x-kvctl-hint` request header. Both become the
// same SessionHint observation. Header form (comma-separated, each `event[;key=value]*`):
//   x-kvctl-hint: tool_end;call=call_1, idle
//   x-kvctl-hint: rewrite;keep_tokens=2048
import { z } from "zod";
import type { SessionHint } from "../../contract/observations.js";

export const HINT_HEADER = "x-kvctl-hint";
export const HINT_EVENTS = ["tool_start", "tool_end", "idle", "close", "rewrite"] as const;

const name = z.string().min(1, "must not be empty").max(256, "must be at most 256 characters");

export const hintBodySchema = z.strictObject({
  event: z.enum(HINT_EVENTS),
  tool_name: name.nullish(),
  tool_call_id: name.nullish(),
  keep_tokens: z.number().int("must be an integer").min(0, "must be >= 0").nullish(),
});

export type HintBody = z.output<typeof hintBodySchema>;

export class HintError extends Error {
  override name = "HintError";
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

function fromBody(b: HintBody, sessionId: string, at: number): SessionHint {
  return {
    type: "SessionHint",
    at,
    sessionId,
    event: b.event,
    toolName: b.tool_name ?? null,
    toolCallId: b.tool_call_id ?? null,
    keepTokens: b.keep_tokens ?? null,
  };
}

/** A hint body -> observation; throws HintError naming the bad field. */
export function parseHintBody(body: unknown, sessionId: string, at: number): SessionHint {
  const r = hintBodySchema.safeParse(body);
  if (!r.success) {
    const i = r.error.issues[0];
    const field = i.path.length ? i.path.join(".") : "(body)";
    throw new HintError(field, `${field}: ${i.message}`);
  }
  return fromBody(r.data, sessionId, at);
}

const HEADER_KEYS: Record<string, keyof HintBody> = {
  tool: "tool_name",
  call: "tool_call_id",
  keep_tokens: "keep_tokens",
};

/** The x-kvctl-hint header -> observations, all or none; throws HintError naming the part. */
export function parseHintHeader(value: string, sessionId: string, at: number): SessionHint[] {
  const out: SessionHint[] = [];
  for (const part of value.split(",")) {
    const [ev, ...kvs] = part
      .trim()
      .split(";")
      .map((s) => s.trim());
    const body: Record<string, unknown> = { event: ev };
    for (const kv of kvs) {
      const eq = kv.indexOf("=");
      const key = HEADER_KEYS[eq > 0 ? kv.slice(0, eq) : kv];
      if (!key)
        throw new HintError(
          HINT_HEADER,
          `${HINT_HEADER}: unknown key '${kv}' (tool, call, keep_tokens)`,
        );
      const v = kv.slice(eq + 1);
      body[key] = key === "keep_tokens" ? Number(v) : v;
    }
    try {
      out.push(parseHintBody(body, sessionId, at));
    } catch (e) {
      if (e instanceof HintError) throw new HintError(HINT_HEADER, `${HINT_HEADER}: ${e.message}`);
      throw e;
    }
  }
  return out;
}
