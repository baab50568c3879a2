// The front door of the four inference routes, on node:http itself: every request through the
// gateway pays for this path, and fastify's per-request pipeline (content-type parsing in an async
// resource, hooks, reply serialisation) cost as much as the gateway's own work. The other routes
// (health, metrics, models, hints, unknown paths) stay on fastify. Both doors give the same error
// bodies and counts for malformed JSON and oversized bodies (the messages below are shared).
import type { IncomingMessage, ServerResponse } from "node:http";
import { type ApiFlavor, errorBody } from "./errors.js";
import type { RouteKind } from "./observations.js";
import { serveTurn } from "./turn.js";
import type { TurnContext } from "./turn-context.js";

export const INFERENCE_ROUTES: ReadonlyMap<string, RouteKind> = new Map([
  ["/v1/chat/completions", "chat"],
  ["/v1/completions", "completions"],
  ["/v1/messages", "messages"],
  ["/generate", "generate"],
]);

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

export interface InferenceFront {
  /** Serves req when it is one of the inference routes and says whether it did. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** From now on new requests get 503 (the gateway is closing). */
  close(): void;
}

export function createInferenceFront(ctx: TurnContext, bodyLimit: number): InferenceFront {
  const { metrics } = ctx;
  let closing = false;

  const reject = (res: ServerResponse, flavor: ApiFlavor, status: number, reason: string, message: string, close = false) => {
    metrics.badRequests.inc({ reason });
    sendJson(res, status, errorBody(flavor, "invalid_request_error", message), close ? { connection: "close" } : undefined);
  };

  const serve = (route: RouteKind, req: IncomingMessage, res: ServerResponse, raw: Buffer) => {
    const flavor: ApiFlavor = route === "messages" ? "anthropic" : "openai";
    let json: unknown;
    if (raw.length > 0) {
      try {
        json = JSON.parse(raw.toString("utf8"));
      } catch (e) {
        return reject(res, flavor, 400, "bad_json", badJsonMessage(e));
      }
    }
    serveTurn(ctx, route, req, res, { raw, json }).catch((e: Error) => {
      ctx.log(`gateway: ${req.method} ${req.url}: ${e.stack ?? e.message}`);
      if (res.headersSent) res.destroy();
      else sendJson(res, 500, errorBody(flavor, "internal_error", e.message));
    });
  };

  return {
    close() {
      closing = true;
    },
    handle(req, res) {
      if (req.method !== "POST") return false;
      const url = req.url ?? "";
      const q = url.indexOf("?");
      const route = INFERENCE_ROUTES.get(q < 0 ? url : url.slice(0, q));
      if (!route) return false;
      const flavor: ApiFlavor = route === "messages" ? "anthropic" : "openai";
      if (closing) {
        sendJson(res, 503, errorBody(flavor, "service_unavailable", "the gateway is shutting down"), { connection: "close" });
        return true;
      }
      const declared = Number(req.headers["content-length"] ?? 0);
      if (declared > bodyLimit) {
        // The body is not read: the connection is closed after the answer.
        reject(res, flavor, 413, "body_too_large", tooLargeMessage(bodyLimit), true);
        return true;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      let over = false;
      req.on("data", (c: Buffer) => {
        if (over) return;
        size += c.length;
        if (size > bodyLimit) {
          over = true;
          chunks.length = 0;
          reject(res, flavor, 413, "body_too_large", tooLargeMessage(bodyLimit), true);
          return;
        }
        chunks.push(c);
      });
      req.on("end", () => {
        if (!over) serve(route, req, res, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
      });
      // A client gone while sending its body: nothing was started, nothing to answer.
      req.on("error", () => undefined);
      return true;
    },
  };
}
