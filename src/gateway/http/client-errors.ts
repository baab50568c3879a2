// A request node's HTTP parser refuses before any route (headers past node's size limit, a
// malformed request line or header, a request that did not arrive in time) still gets its answer
// in the client's API dialect, as every other refusal does; fastify's default answers in its own
// shape. The dialect comes from the bytes node read before it gave up (the path, and an
// anthropic-version header when one was read).
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { type ApiFlavor, errorBody } from "../core/errors.js";
import { flavorOfRequest } from "../request/routes.js";

type ParserError = Error & { code?: string; rawPacket?: unknown };

function flavorOfPacket(raw: unknown): ApiFlavor {
  const head = Buffer.isBuffer(raw) ? raw.subarray(0, 16_384).toString("latin1") : "";
  const url = /^[A-Z]+ (\S+)/.exec(head)?.[1] ?? "/";
  const anthropic = /\r\nanthropic-version\s*:/i.test(head);
  return flavorOfRequest(url, anthropic ? { "anthropic-version": "" } : {});
}

function refusalOf(err: ParserError): [number, string, string] {
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT")
    return [408, "invalid_request_error", "the request did not arrive within the gateway's time"];
  if (err.code === "HPE_HEADER_OVERFLOW")
    return [
      431,
      "request_too_large",
      "the request line and headers are larger than the gateway reads " +
        "(node's --max-http-header-size, 16 KiB by default)",
    ];
  return [400, "invalid_request_error", `malformed HTTP request (${err.code ?? err.message})`];
}

/** fastify's clientErrorHandler: the answer, in the client's dialect, then the connection closed. */
export function answerClientError(err: ParserError, socket: Duplex): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const [status, type, message] = refusalOf(err);
  const body = errorBody(flavorOfPacket(err.rawPacket), type, message);
  // Written and closed at once, as node and fastify do: a socket left to end gracefully is
  // reported again by node's deadline sweep until it is gone.
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
        "Content-Type: application/json\r\n" +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
  socket.destroy();
}
