// What the gateway asks of a worker's tokens: the tokenize calls that render a prompt (or a part
// of it) the way the worker will, and the token-id fields it adds to a request.

export interface TokenFieldsAdded {
  prompt: boolean;
  response: boolean;
  /** Where the output ids are: chat `response_token_ids`, completions `token_ids`. */
  responseKey: "response_token_ids" | "token_ids";
}

/** A tokenize call to a worker: SGLang's /v1/tokenize, or the kvctl worker's Anthropic route. */
export interface TokenizeCall {
  path: "/v1/tokenize" | "/kvctl/v1/messages/tokenize";
  body: Record<string, unknown>;
}

export const MESSAGES_TOKENIZE_PATH = "/kvctl/v1/messages/tokenize";

/** SGLang's /v1/tokenize with this body. */
export function tokenizeCall(body: Record<string, unknown>): TokenizeCall {
  return { path: "/v1/tokenize", body };
}
