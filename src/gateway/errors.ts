// Error bodies in the format the client's API speaks: OpenAI's for /v1/* and /generate,
// Anthropic's for /v1/messages; the message says what was wrong and, for input, which field.
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
