// Token ids come from the worker that served the request, never from a second tokenizer: this
// file reads them from the answer (request/token-request.ts asks for them) and calls a worker's
// tokenizer for the turns whose answer carries none.
//   non-streaming chat/completions: the request asks for return_token_ids (SGLang 0.5.23 then puts
//     prompt_token_ids and response_token_ids in each choice) and the gateway cuts the fields the
//     client did not ask for out of the response bytes, leaving every other byte as the worker sent it;
//   streaming requests (SGLang refuses the flags with stream=true): /v1/tokenize on the same
//     worker with the request's messages (or prompt); a chat stream's output ids from the
//     framed sglext event the gateway asks for (stream-output-ids.ts);
//   /generate: the request's input_ids, or /v1/tokenize of its text; output_ids from the answer;
//   /v1/messages (Anthropic): the worker's own conversion to chat and chat template, through the
//     kvctl worker's /kvctl/v1/messages/tokenize (SGLang 0.5.23 returns no token ids there and its
//     /v1/tokenize does not read Anthropic messages); the answer carries no output ids.
import type { TokenFieldsAdded, TokenizeCall } from "../request/tokenize-call.js";
import type { TurnResult } from "./turn-result.js";
import type { Pool } from "undici";
import type { RouteKind, Usage } from "../../contract/observations.js";
import { isIntArray, objectOf as obj } from "../core/json-shape.js";
import { callJson } from "./upstream.js";

// Inside a JSON string every `"` is escaped, so `"name"` with bare quotes only ever starts a key.
// Cuts every `,"key": [ ... ]` (the comma before it and the whitespace between), or, for a key that
// opens its object, `"key": [ ... ]` with the whitespace and the comma after it.
const isSpace = (c: number) => c === 32 || c === 9 || c === 10 || c === 13;

function cut(text: string, key: string): string {
  const needle = `"${key}"`;
  let at = text.indexOf(needle);
  if (at < 0) return text;
  let out = "";
  let from = 0;
  while (at >= 0) {
    let j = at + needle.length;
    while (isSpace(text.charCodeAt(j))) j++;
    let close = -1;
    if (text.charCodeAt(j) === 58 /* : */) {
      j++;
      while (isSpace(text.charCodeAt(j))) j++;
      if (text.charCodeAt(j) === 91 /* [ */) close = text.indexOf("]", j);
    }
    if (close < 0) {
      at = text.indexOf(needle, at + 1);
      continue;
    }
    let start = at;
    let end = close + 1;
    let b = at;
    while (b > from && isSpace(text.charCodeAt(b - 1))) b--;
    if (b > from && text.charCodeAt(b - 1) === 44 /* , */) start = b - 1;
    else {
      while (isSpace(text.charCodeAt(end))) end++;
      if (text.charCodeAt(end) === 44) end++;
    }
    out += text.slice(from, start);
    from = end;
    at = text.indexOf(needle, end);
  }
  return out + text.slice(from);
}

/** Removes the token-id fields the gateway added from a response body, leaving all other bytes. */
export function stripTokenFields(text: string, added: TokenFieldsAdded): string {
  let t = text;
  if (added.prompt) t = cut(t, "prompt_token_ids");
  if (added.response) t = cut(t, added.responseKey);
  return t;
}

function num(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

export function usageOf(u: unknown): Usage {
  const o = obj(u);
  const details = obj(o?.prompt_tokens_details);
  // Anthropic's input_tokens leaves out the tokens read from (or written to) the cache.
  const anthropicPrompt =
    num(o?.input_tokens) === null
      ? null
      : (num(o?.input_tokens) ?? 0) +
        (num(o?.cache_read_input_tokens) ?? 0) +
        (num(o?.cache_creation_input_tokens) ?? 0);
  return {
    promptTokens: num(o?.prompt_tokens) ?? anthropicPrompt,
    completionTokens: num(o?.completion_tokens ?? o?.output_tokens),
    cachedTokens: num(details?.cached_tokens ?? o?.cache_read_input_tokens),
  };
}

/** What a non-streaming answer tells about the turn, per route. */
export function turnResultOf(route: RouteKind, json: unknown): TurnResult {
  const o = obj(json);
  const r: TurnResult = {
    promptTokens: null,
    outputTokens: null,
    finishReason: null,
    usage: usageOf(o?.usage),
    toolCalls: [],
    reasoningText: null,
  };
  if (!o) return r;
  if (route === "generate") return generateResult(r, json, o);
  if (route === "messages") {
    r.finishReason = typeof o.stop_reason === "string" ? o.stop_reason : null;
    if (Array.isArray(o.content)) {
      for (const b of o.content) {
        const blk = obj(b);
        if (blk?.type === "tool_use")
          r.toolCalls.push({
            id: typeof blk.id === "string" ? blk.id : null,
            name: typeof blk.name === "string" ? blk.name : null,
          });
      }
    }
    return r;
  }
  const choice = Array.isArray(o.choices) ? obj(o.choices[0]) : null;
  return choice ? choiceResult(r, choice) : r;
}

/** /generate: the first answer's output ids, finish reason and its own token counts. */
function generateResult(r: TurnResult, json: unknown, o: Record<string, unknown>): TurnResult {
  const first = Array.isArray(json) ? obj(json[0]) : o;
  const meta = obj(first?.meta_info);
  if (isIntArray(first?.output_ids)) r.outputTokens = first.output_ids as number[];
  const fr = obj(meta?.finish_reason);
  r.finishReason = typeof fr?.type === "string" ? fr.type : null;
  r.usage = {
    promptTokens: num(meta?.prompt_tokens),
    completionTokens: num(meta?.completion_tokens),
    cachedTokens: num(meta?.cached_tokens),
  };
  return r;
}

/** chat/completions: the first choice's token ids, finish reason, reasoning text and tool calls. */
function choiceResult(r: TurnResult, choice: Record<string, unknown>): TurnResult {
  r.finishReason = typeof choice.finish_reason === "string" ? choice.finish_reason : null;
  if (isIntArray(choice.prompt_token_ids)) r.promptTokens = choice.prompt_token_ids;
  if (isIntArray(choice.response_token_ids)) r.outputTokens = choice.response_token_ids;
  else if (isIntArray(choice.token_ids)) r.outputTokens = choice.token_ids;
  const msg = obj(choice.message);
  if (!msg) return r;
  if (typeof msg.reasoning_content === "string" && msg.reasoning_content !== "")
    r.reasoningText = msg.reasoning_content;
  if (Array.isArray(msg.tool_calls)) {
    for (const t of msg.tool_calls) {
      const tc = obj(t);
      const fn = obj(tc?.function);
      r.toolCalls.push({
        id: typeof tc?.id === "string" ? tc.id : null,
        name: typeof fn?.name === "string" ? fn.name : null,
      });
    }
  }
  return r;
}

/** Asks the worker to tokenize; throws saying why when it cannot. */
export async function tokenizeOn(
  pool: Pool,
  call: TokenizeCall,
  timeoutMs: number,
): Promise<number[]> {
  const r = await callJson(pool, "POST", call.path, call.body, timeoutMs);
  if (r.status !== 200)
    throw new Error(`${call.path} answered ${r.status}: ${r.text.slice(0, 200)}`);
  const tokens = obj(r.json)?.tokens;
  if (!isIntArray(tokens)) throw new Error(`${call.path} answered without a token list`);
  return tokens;
}
