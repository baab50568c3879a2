// A /v1/messages prompt's token ids from a worker without kvctl's tokenize route: the gateway
// renders the Anthropic request as the chat SGLang 0.5.23 converts it to (system text, text
// blocks, tool_use as tool_calls, tool_result as tool messages, tools as functions), has the worker
// tokenize that chat (/v1/tokenize, its chat template) and keeps the ids only when their count
// equals the worker's own /v1/messages/count_tokens. What is lost against the kvctl route: requests
// with blocks this rendering does not cover (images, documents, thinking, search results) get no
// ids, a rendering that differs in any token is dropped rather than trusted, and each turn costs
// two worker calls instead of one.
import type { TokenizeCall } from "../request/tokenize-call.js";
import { isObject } from "../core/json-shape.js";
import { MESSAGES_TOKENIZE_PATH, tokenizeCall } from "../request/tokenize-call.js";
import { callJson } from "./upstream.js";
import type { Pool } from "undici";

type Msg = Record<string, unknown>;

const asciiString = (s: string) =>
  JSON.stringify(s).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );

/** Python's json.dumps with its defaults (", " and ": " separators, ASCII only): how SGLang writes tool arguments. */
export function pythonJsonDumps(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pythonJsonDumps).join(", ")}]`;
  if (isObject(v))
    return `{${Object.entries(v)
      .map(([k, x]) => `${asciiString(k)}: ${pythonJsonDumps(x)}`)
      .join(", ")}}`;
  return typeof v === "string" ? asciiString(v) : JSON.stringify(v);
}

function systemText(system: unknown): string | null | undefined {
  if (system === undefined || system === null) return null;
  if (typeof system === "string") return system.trim() ? system : null;
  if (!Array.isArray(system)) return undefined;
  const parts = system
    .filter((b) => isObject(b) && b.type === "text" && typeof b.text === "string" && b.text !== "")
    .map((b) => (b as Msg).text as string);
  return parts.length ? parts.join("\n") : null;
}

function toolResultText(content: unknown): string | undefined {
  if (typeof content === "string") return content;
  if (
    !Array.isArray(content) ||
    !content.every((b) => isObject(b) && b.type === "text" && typeof b.text === "string")
  )
    return undefined;
  return content.map((b) => (b as Msg).text as string).join("\n");
}

/** Appends the chat messages one Anthropic message becomes; false when it holds a block not covered. */
function convertMessage(m: Msg, out: Msg[]): boolean {
  if (typeof m.content === "string") {
    out.push({ role: m.role, content: m.content });
    return true;
  }
  if (!Array.isArray(m.content)) return false;
  const parts: Msg[] = [];
  const calls: Msg[] = [];
  const flush = () => {
    if (parts.length)
      out.push({ role: "user", content: parts.length === 1 ? parts[0].text : [...parts] });
    parts.length = 0;
  };
  for (const b of m.content as unknown[]) {
    if (!isObject(b)) return false;
    if (b.type === "text" && typeof b.text === "string") parts.push({ type: "text", text: b.text });
    else if (b.type === "tool_use" && typeof b.id === "string")
      calls.push({
        id: b.id,
        type: "function",
        function: { name: b.name ?? "", arguments: pythonJsonDumps(b.input ?? {}) },
      });
    else if (b.type === "tool_result" && m.role === "user") {
      const text = toolResultText(b.content);
      if (text === undefined) return false;
      flush();
      out.push({ role: "tool", tool_call_id: b.tool_use_id ?? "", content: text });
    } else return false;
  }
  if (m.role === "user") flush();
  else if (parts.length || calls.length) {
    const msg: Msg = { role: m.role };
    if (calls.length) msg.tool_calls = calls;
    if (parts.length) msg.content = parts.length === 1 ? parts[0].text : parts;
    out.push(msg);
  } else out.push({ role: m.role, content: "" });
  return true;
}

/** The chat tokenize body an Anthropic request renders to, or null when it holds what is not covered. */
export function chatFromMessages(body: Msg): Msg | null {
  const sys = systemText(body.system);
  if (sys === undefined || !Array.isArray(body.messages)) return null;
  const messages: Msg[] = sys === null ? [] : [{ role: "system", content: sys }];
  for (const m of body.messages) if (!isObject(m) || !convertMessage(m, messages)) return null;
  const chat: Msg = { messages };
  if (typeof body.model === "string") chat.model = body.model;
  if (Array.isArray(body.tools) && body.tools.length) {
    if (!body.tools.every((t) => isObject(t) && typeof t.name === "string")) return null;
    chat.tools = body.tools.map((t) => ({
      type: "function",
      function: { name: t.name, description: t.description, parameters: t.input_schema },
    }));
  }
  return chat;
}

const COUNT_FIELDS = ["model", "messages", "system", "tools", "tool_choice", "thinking"];

/** What the fallback needs of a worker: its id, its connections, and whether it serves kvctl's route. */
export interface TokenizingWorker {
  readonly id: string;
  readonly pool: Pool;
  readonly messagesTokenize: boolean;
}

/**
 * The prompt's ids for a tokenize call, falling back as the file comment says; throws saying why
 * not. `tokenize` asks the worker (its Tokenizer's, so this file needs no HTTP of its own but the
 * count).
 */
export async function tokenizePrompt(
  w: TokenizingWorker,
  call: TokenizeCall,
  timeoutMs: number,
  tokenize: (call: TokenizeCall) => Promise<number[]>,
): Promise<number[]> {
  if (call.path !== MESSAGES_TOKENIZE_PATH || w.messagesTokenize) return tokenize(call);
  const chat = chatFromMessages(call.body);
  if (!chat)
    throw new Error(
      `worker ${w.id} has no ${MESSAGES_TOKENIZE_PATH} and the request holds blocks the gateway does not render`,
    );
  const countBody: Msg = {};
  for (const k of COUNT_FIELDS) if (call.body[k] !== undefined) countBody[k] = call.body[k];
  const [ids, count] = await Promise.all([
    tokenize(tokenizeCall(chat)),
    callJson(w.pool, "POST", "/v1/messages/count_tokens", countBody, timeoutMs),
  ]);
  const n = isObject(count.json) ? count.json.input_tokens : null;
  if (count.status !== 200 || ids.length !== n) {
    throw new Error(
      `worker ${w.id}: the gateway's chat rendering has ${ids.length} tokens, /v1/messages/count_tokens says ${count.status === 200 ? String(n) : `HTTP ${count.status}`}; no prompt ids`,
    );
  }
  return ids;
}
