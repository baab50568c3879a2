// Error bodies in the dialect of the client's API, so its SDK parses them into its own error types:
// Anthropic's ({"type":"error","error":{"type","message"}}) or OpenAI's
// ({"error":{"message","type","param","code"}}); request/routes.ts says which a request speaks.
// The SDKs pick the exception class from the status code; the Anthropic type names follow
// SGLang's own mapping. The message says what was wrong and, for input, which field. Both doors
// (the node:http inference front and fastify) send the same bodies for the same faults.
import type { ServerResponse } from "node:http";

export type ApiFlavor = "openai" | "anthropic";

// The gateway's error types, as Anthropic names them.
const ANTHROPIC_TYPES: Readonly<Record<string, string>> = {
  invalid_request_error: "invalid_request_error",
  request_too_large: "request_too_large",
  not_found: "not_found_error",
  service_unavailable: "overloaded_error",
  rate_limited: "rate_limit_error",
  upstream_error: "api_error",
  upstream_timeout: "api_error",
  internal_error: "api_error",
  authentication_error: "authentication_error",
  permission_error: "permission_error",
  rate_limit_error: "rate_limit_error",
};

export function errorBody(
  flavor: ApiFlavor,
  type: string,
  message: string,
  param: string | null = null,
): string {
  if (flavor === "anthropic")
    return JSON.stringify({
      type: "error",
      error: { type: ANTHROPIC_TYPES[type] ?? "api_error", message },
    });
  return JSON.stringify({
    error: {
      message,
      type: type === "request_too_large" ? "invalid_request_error" : type,
      param,
      code: null,
    },
  });
}

/** The SSE event sent when a stream cannot be finished (the worker failed after the headers went out). */
export function streamErrorEvent(flavor: ApiFlavor, type: string, message: string): string {
  if (flavor === "anthropic") return `event: error\ndata: ${errorBody(flavor, type, message)}\n\n`;
  return `data: ${errorBody(flavor, type, message)}\n\n`;
}

export const tooLargeMessage = (limit: number): string =>
  `request body is larger than the limit of ${limit} bytes`;
export const badJsonMessage = (e: unknown): string =>
  `request body is not valid JSON: ${(e as Error).message}`;

/** A JSON answer in one write (status line, headers and body together). */
export function sendJson(
  res: ServerResponse,
  status: number,
  text: string,
  headers?: Record<string, string>,
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}
