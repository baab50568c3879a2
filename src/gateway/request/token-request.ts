// What a request asks of the worker's tokens, from its body: the token-id fields spliced into
// the bytes sent on (withTokenIds), the prompt ids it carries itself, and the tokenize calls that
// render its prompt (or a part of it) the way the worker will.
import {
  MESSAGES_TOKENIZE_PATH,
  type TokenFieldsAdded,
  type TokenizeCall,
  tokenizeCall,
} from "./tokenize-call.js";
import { fieldBytes, withFieldBytes } from "../core/json-splice.js";
import type { RouteKind } from "../../contract/observations.js";
import { isIntArray } from "../core/json-shape.js";

const RETURN_TOKEN_IDS = fieldBytes("return_token_ids", true);

/**
 * Adds `"return_token_ids":true` to a JSON object's bytes (after every other key, so it wins over a
 * client's own `false` the way Python's json keeps the last duplicate) and says which response
 * fields the client did not ask for.
 */
export function withTokenIds(
  route: "chat" | "completions",
  raw: Buffer,
  body: Record<string, unknown>,
): { raw: Buffer; added: TokenFieldsAdded } {
  const responseKey = route === "chat" ? "response_token_ids" : "token_ids";
  if (body.return_token_ids === true)
    return { raw, added: { prompt: false, response: false, responseKey } };
  // Completions return prompt ids only with return_token_ids; chat also with return_prompt_token_ids.
  const added = {
    prompt: route === "completions" || body.return_prompt_token_ids !== true,
    response: true,
    responseKey,
  } as const;
  return { raw: withFieldBytes(raw, RETURN_TOKEN_IDS), added };
}

/** Prompt token ids the request itself carries (no worker call needed), if any. */
export function promptTokensInRequest(
  route: RouteKind,
  body: Record<string, unknown>,
): number[] | null {
  if (route === "generate" && isIntArray(body.input_ids)) return body.input_ids;
  if (route === "completions" && isIntArray(body.prompt) && body.prompt.length > 0)
    return body.prompt;
  return null;
}

/** The tokenize call that renders this request's prompt exactly as the worker will, or null. */
export function tokenizeRequestFor(
  route: RouteKind,
  body: Record<string, unknown>,
): TokenizeCall | null {
  if (route === "messages") {
    if (!Array.isArray(body.messages)) return null;
    const { stream: _stream, ...rest } = body;
    return { path: MESSAGES_TOKENIZE_PATH, body: rest };
  }
  const b = tokenizeBodyFor(route, body);
  return b ? tokenizeCall(b) : null;
}

function tokenizeBodyFor(
  route: RouteKind,
  body: Record<string, unknown>,
): Record<string, unknown> | null {
  if (route === "chat") {
    if (!Array.isArray(body.messages)) return null;
    const t: Record<string, unknown> = { messages: body.messages };
    for (const k of [
      "model",
      "tools",
      "tool_choice",
      "reasoning_effort",
      "chat_template_kwargs",
      "continue_final_message",
    ]) {
      if (body[k] !== undefined) t[k] = body[k];
    }
    return t;
  }
  if (route === "completions" && typeof body.prompt === "string")
    return { prompt: body.prompt, ...(body.model ? { model: body.model } : {}) };
  if (route === "generate" && typeof body.text === "string") return { prompt: body.text };
  return null;
}
