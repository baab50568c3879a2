// Prompt-cache markers in a request: Anthropic `cache_control` breakpoints (on tools, system and
// message content blocks, or top level for automatic caching) and OpenAI `prompt_cache_retention`.
// Pure: this file finds the markers and checks Anthropic's rules (at most 4 breakpoints, longer
// TTLs before shorter ones); the gateway turns each into a token position with the worker's own
// tokenizer (prefixTokenizeRequest), since only the worker's template knows where a block ends.
import type { RouteKind } from "../../contract/observations.js";
import { objectOf as obj } from "../core/json-shape.js";
import type { MarkerSpec } from "./shapes.js";

export const MAX_BREAKPOINTS = 4;

export interface ParsedMarkers {
  specs: MarkerSpec[];
  /** Why the markers are unusable; when non-empty, specs is empty (nothing is half-applied). */
  errors: string[];
}

export interface MarkerTtls {
  inMemoryTtlSeconds: number;
  longTtlSeconds: number;
}

const TTLS: Record<string, number> = { "5m": 300, "1h": 3600 };

/** The TTL of a cache_control value, or an error naming the field. */
function ttlOf(cc: unknown, field: string, errors: string[], cap: number): number | null {
  const c = obj(cc);
  if (!c) {
    errors.push(`${field} must be an object`);
    return null;
  }
  if (c.type !== "ephemeral") {
    errors.push(`${field}.type must be "ephemeral"`);
    return null;
  }
  if (c.ttl === undefined) return Math.min(TTLS["5m"], cap);
  const t = typeof c.ttl === "string" ? TTLS[c.ttl] : undefined;
  if (t === undefined) {
    errors.push(`${field}.ttl must be "5m" or "1h" (got ${JSON.stringify(c.ttl)})`);
    return null;
  }
  return Math.min(t, cap);
}

/** The markers of a chat or messages request; null when it carries none. */
export function parseCacheMarkers(
  route: RouteKind,
  body: Record<string, unknown>,
  ttls: MarkerTtls,
): ParsedMarkers | null {
  if (route !== "chat" && route !== "messages") return null;
  const specs: MarkerSpec[] = [];
  const errors: string[] = [];
  const cap = ttls.longTtlSeconds;
  const mark = (cc: unknown, field: string, at: string, messages: number | null) => {
    const ttl = ttlOf(cc, field, errors, cap);
    if (ttl !== null) specs.push({ at, ttlSeconds: ttl, messages });
  };
  markBlocks(route, body, mark);
  if (body.cache_control !== undefined) mark(body.cache_control, "cache_control", "auto", null);
  if (specs.length + errors.length > MAX_BREAKPOINTS)
    errors.push(
      `more than ${MAX_BREAKPOINTS} cache_control breakpoints (${specs.length + errors.length})`,
    );
  for (let i = 1; i < specs.length; i++) {
    if (specs[i].ttlSeconds > specs[i - 1].ttlSeconds) {
      errors.push(
        `TTL order: the ${specs[i].ttlSeconds}s breakpoint at ${specs[i].at} follows a shorter ${specs[i - 1].ttlSeconds}s one at ${specs[i - 1].at} (longer TTLs must come first)`,
      );
      break;
    }
  }
  const retention = body.prompt_cache_retention;
  if (retention !== undefined && retention !== null) {
    if (retention === "in_memory")
      specs.push({
        at: "prompt_cache_retention",
        ttlSeconds: Math.min(ttls.inMemoryTtlSeconds, cap),
        messages: null,
      });
    else if (retention === "24h")
      specs.push({ at: "prompt_cache_retention", ttlSeconds: cap, messages: null });
    else
      errors.push(
        `prompt_cache_retention must be "in_memory" or "24h" (got ${JSON.stringify(retention)})`,
      );
  }
  if (specs.length === 0 && errors.length === 0) return null;
  return errors.length ? { specs: [], errors } : { specs, errors };
}

type Mark = (cc: unknown, field: string, at: string, messages: number | null) => void;

/** Every cache_control of the tools, the system blocks (messages) and the messages, in order. */
function markBlocks(route: RouteKind, body: Record<string, unknown>, mark: Mark): void {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  tools.forEach((t, i) => {
    const cc = obj(t)?.cache_control;
    if (cc !== undefined) mark(cc, `tools[${i}].cache_control`, `tools[${i}]`, 0);
  });
  if (route === "messages" && Array.isArray(body.system)) {
    body.system.forEach((b, j) => {
      const cc = obj(b)?.cache_control;
      if (cc !== undefined) mark(cc, `system[${j}].cache_control`, "system", 0);
    });
  }
  const msgs = Array.isArray(body.messages) ? body.messages : [];
  msgs.forEach((m, i) => {
    const mo = obj(m);
    if (!mo) return;
    const count = i + 1;
    if (mo.cache_control !== undefined)
      mark(mo.cache_control, `messages[${i}].cache_control`, `message[${i}]`, count);
    if (Array.isArray(mo.content)) {
      mo.content.forEach((b, j) => {
        const cc = obj(b)?.cache_control;
        if (cc !== undefined)
          mark(cc, `messages[${i}].content[${j}].cache_control`, `message[${i}]`, count);
      });
    }
  });
}

function leadingSystem(msgs: unknown[]): number {
  let n = 0;
  while (n < msgs.length && obj(msgs[n])?.role === "system") n++;
  return n;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((b) => {
      const o = obj(b);
      if (!o) return "";
      if (typeof o.text === "string") return o.text;
      if (o.type === "tool_result") return textOf(o.content);
      if (o.type === "tool_use") return JSON.stringify(o.input ?? {});
      return "";
    })
    .join("");
}

/**
 * The /v1/tokenize request rendering the prompt up to a marker (no generation prompt). The
 * marker's position is then the common prefix of its tokens and the prompt's, which holds for a
 * template that renders the last message of a prefix a little differently from the full prompt.
 * Anthropic requests are rendered as chat messages with their text (the worker's template is the
 * same one its own Anthropic front end applies).
 */
export function prefixTokenizeRequest(
  route: RouteKind,
  body: Record<string, unknown>,
  spec: MarkerSpec,
): Record<string, unknown> | null {
  if (spec.messages === null) return null;
  const msgs = Array.isArray(body.messages) ? body.messages : [];
  const req: Record<string, unknown> = { add_generation_prompt: false };
  for (const k of ["model", "tools", "chat_template_kwargs"])
    if (body[k] !== undefined) req[k] = body[k];
  if (route === "chat") {
    const n = spec.messages === 0 ? leadingSystem(msgs) : spec.messages;
    if (n === 0) return null;
    req.messages = msgs.slice(0, n);
    return req;
  }
  const out: { role: string; content: string }[] = [];
  const sys = body.system;
  if (sys !== undefined) out.push({ role: "system", content: textOf(sys) });
  for (const m of msgs.slice(0, spec.messages)) {
    const mo = obj(m);
    if (mo && typeof mo.role === "string") out.push({ role: mo.role, content: textOf(mo.content) });
  }
  if (out.length === 0) return null;
  req.messages = out;
  return req;
}
