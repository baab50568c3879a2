// What every HTTP stand-in for an SGLang worker does alike (helpers/http-stand-in.ts,
// helpers/worker-stand-in.ts, gateway-http.test.ts): read the request's JSON body, answer JSON,
// and the answers of /server_info and /v1/tokenize in the real server's shape.
import type { IncomingMessage, ServerResponse } from "node:http";

/** The request's body parsed as JSON ({} when it has none). */
export async function readJsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
}

/** Answers `res` with `v` as JSON and that status. */
export function sendJson(res: ServerResponse, status: number, v: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(v));
}

/** /server_info as a worker without KV events answers it (page size 4). */
export const STAND_IN_SERVER_INFO = { page_size: 4, kv_events: null, kv_events_config: null };

/** One token per character of the text, the stand-ins' tokenizer. */
export const standInTokens = (text: string): number[] => [...text].map((c) => c.charCodeAt(0));

/** /v1/tokenize's answer for a chat (messages) or completion (prompt) body. */
export const standInTokenize = (body: Record<string, unknown>) => ({
  tokens: standInTokens(JSON.stringify(body.messages ?? body.prompt)),
  count: 0,
  max_model_len: 4096,
});
