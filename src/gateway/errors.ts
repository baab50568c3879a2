// Error bodies in the format the client's API speaks: OpenAI's for /v1/* and /generate,
// Anthropic's for /v1/messages; the message says what was wrong and, for input, which field.
// Both doors (the node:http inference front and fastify) send the same bodies for the same faults.
import type { ServerResponse } from "node:http";

export type ApiFlavor = "openai" | "anthropic";

export function errorBody(flavor: ApiFlavor, type: string, message: string, param: string | null = null): string {
  if (flavor === "anthropic") return JSON.stringify({ type: "error", error: { type, message } });
  return JSON.stringify({ error: { message, type, param, code: null } });
}

/** The SSE event sent when a stream cannot be finished (the worker failed after the headers went out). */
export function streamErrorEvent(flavor: ApiFlavor, type: string, message: string): string {
  if (flavor === "anthropic") return `event: error\ndata: ${errorBody(flavor, type, message)}\n\n`;
  return `data: ${errorBody(flavor, type, message)}\n\n`;
}

export const tooLargeMessage = (limit: number): string => `request body is larger than the limit of ${limit} bytes`;
export const badJsonMessage = (e: unknown): string => `request body is not valid JSON: ${(e as Error).message}`;

/** A JSON answer in one write (status line, headers and body together). */
export function sendJson(res: ServerResponse, status: number, text: string, headers?: Record<string, string>): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
