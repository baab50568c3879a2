// The whole-request deadline (listener.bodyTimeoutMs) to the timer's precision. node checks its
// requestTimeout only on a sweep every connectionsCheckingInterval, and a sweep that finds a
// thousand expired connections closes them all in one go, so a trickled body was cut well after
// its deadline. Here each connection has one timer, started when a request's headers have arrived
// and restarted by the next request on a kept-alive connection; when it fires on a request that is
// still not whole, the request is cut the way node cuts it (clientError with
// ERR_HTTP_REQUEST_TIMEOUT: 408, socket destroyed, counted by the listener). A request whole by
// then is left alone, however long its answer takes. node's sweep stays as the backstop: it counts
// from the request's first byte, this timer from its headers, so neither cuts before the deadline.
import type { IncomingMessage, Server } from "node:http";
import type { Socket } from "node:net";

const DEADLINE = Symbol("kvctl.bodyDeadline");

interface Deadline {
  timer: NodeJS.Timeout;
  req: IncomingMessage;
  /** When the request's headers arrived (a timer counts from its loop turn's start, which may be earlier). */
  since: number;
}

type Tracked = Socket & { [DEADLINE]?: Deadline };

/** A request's headers arrived on `server`: its body has `ms` from now to arrive whole. */
export function bodyDeadlineStarts(server: Server, req: IncomingMessage, ms: number): void {
  const socket = req.socket as Tracked;
  const d = socket[DEADLINE];
  if (d) {
    d.req = req;
    d.since = performance.now();
    d.timer.refresh();
    return;
  }
  const fresh: Deadline = {
    req,
    since: performance.now(),
    timer: setTimeout(() => expire(server, socket, fresh, ms), ms),
  };
  fresh.timer.unref();
  socket[DEADLINE] = fresh;
  socket.once("close", () => clearTimeout(fresh.timer));
}

function expire(server: Server, socket: Socket, d: Deadline, ms: number): void {
  if (socket.destroyed || d.req.complete) return;
  const early = d.since + ms - performance.now();
  if (early > 0) {
    d.timer = setTimeout(() => expire(server, socket, d, ms), Math.ceil(early));
    d.timer.unref();
    return;
  }
  socket.on("error", () => undefined);
  const e = Object.assign(
    new Error("the request did not arrive whole within listener.bodyTimeoutMs"),
    { code: "ERR_HTTP_REQUEST_TIMEOUT" },
  );
  if (server.emit("clientError", e, socket)) return;
  if (socket.writable) socket.write("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n");
  socket.destroy(e);
}
