// The front door of the four inference routes, on node:http itself: every request through the
// gateway pays for this path, and fastify's per-request pipeline (content-type parsing in an async
// resource, hooks, reply serialisation) cost as much as the gateway's own work. The other routes
// (health, metrics, models, hints, unknown paths) stay on fastify. Both doors give the same error
// bodies and counts for malformed JSON and oversized bodies (errors.ts holds the messages).
import type { TurnRequest } from "../request/shapes.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { RouteKind } from "../../contract/observations.js";
import { principalOf } from "../auth/gate.js";
import { scopedSessionId } from "../auth/ownership.js";
import { isolate } from "../auth/cache-isolation.js";
import { type ApiFlavor, errorBody, sendJson, tooLargeMessage } from "../core/errors.js";
import { flavorOf, routeOfUrl } from "../request/routes.js";
import { parseTurn, TurnRequestError, type TurnRules } from "../request/turn-request.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "../turn/turn-deps.js";
import { requestFields } from "./request-log.js";

export interface InferenceFront {
  /** Serves req when it is one of the inference routes and says whether it did. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** From now on new requests get 503 (the gateway is closing). */
  close(): void;
}

/** Serves one parsed inference turn (turn/turn.ts's serveTurn, wired in by gateway.ts). */
export type ServeTurn = (
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  res: ServerResponse,
) => Promise<void>;

export function createInferenceFront(
  deps: TurnDeps,
  tel: Telemetry,
  bodyLimit: number,
  serveTurn: ServeTurn,
): InferenceFront {
  const pins = deps.config.policies?.pins;
  const rules: TurnRules = {
    markerTtls: {
      inMemoryTtlSeconds: pins?.inMemoryTtlSeconds ?? 600,
      longTtlSeconds: pins?.longTtlSeconds ?? 86_400,
    },
  };
  let closing = false;
  const tooLarge = (res: ServerResponse, flavor: ApiFlavor) => {
    tel.metrics.badRequests.inc({ reason: "body_too_large" });
    // The rest of the body is not read: the connection is closed after the answer.
    sendJson(res, 413, errorBody(flavor, "request_too_large", tooLargeMessage(bodyLimit)), {
      connection: "close",
    });
  };
  return {
    close() {
      closing = true;
    },
    handle(req, res) {
      const route = req.method === "POST" ? routeOfUrl(req.url ?? "") : undefined;
      if (!route) return false;
      const flavor = flavorOf(route);
      if (closing)
        sendJson(
          res,
          503,
          errorBody(flavor, "service_unavailable", "the gateway is shutting down"),
          { connection: "close" },
        );
      else if (Number(req.headers["content-length"] ?? 0) > bodyLimit) tooLarge(res, flavor);
      else
        readBody(
          req,
          bodyLimit,
          (raw) => serve(deps, tel, rules, serveTurn, route, req, res, raw),
          () => tooLarge(res, flavor),
        );
      return true;
    },
  };
}

/** Collects the body up to limit bytes: done with its bytes, or over once it passes the limit. */
function readBody(
  req: IncomingMessage,
  limit: number,
  done: (raw: Buffer) => void,
  over: () => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let overLimit = false;
  req.on("data", (c: Buffer) => {
    if (overLimit) return;
    size += c.length;
    if (size > limit) {
      overLimit = true;
      chunks.length = 0;
      over();
      return;
    }
    chunks.push(c);
  });
  req.on("end", () => {
    if (!overLimit) done(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
  });
  // A client gone while sending its body: nothing was started, nothing to answer.
  req.on("error", () => undefined);
}

function serve(
  deps: TurnDeps,
  tel: Telemetry,
  rules: TurnRules,
  serveTurn: ServeTurn,
  route: RouteKind,
  req: IncomingMessage,
  res: ServerResponse,
  raw: Buffer,
): void {
  const failed = (e: Error) => {
    tel.log.error(`gateway: ${req.method} ${req.url}: ${e.stack ?? e.message}`, requestFields(req));
    if (res.headersSent) res.destroy();
    else sendJson(res, 500, errorBody(flavorOf(route), "internal_error", e.message));
  };
  let turn: TurnRequest;
  try {
    turn = parseTurn(route, raw, req.headers, rules);
  } catch (e) {
    if (!(e instanceof TurnRequestError)) return failed(e as Error);
    tel.metrics.badRequests.inc({ reason: e.reason });
    if (e.ofRoute) tel.metrics.countRequest(route, "none", 400);
    return sendJson(
      res,
      400,
      errorBody(flavorOf(route), "invalid_request_error", e.message, e.field),
    );
  }
  const who = principalOf(req);
  turn.tenant = who.tenant;
  turn.admin = who.admin;
  const tenants = deps.auth?.auth.tenants;
  const cannot =
    who.tenant === null || !tenants ? null : isolate(turn, tenants.get(who.tenant), tenants.size);
  if (cannot !== null) {
    tel.metrics.countRequest(route, "none", 400);
    return sendJson(res, 400, errorBody(flavorOf(route), "invalid_request_error", cannot));
  }
  if (turn.session) turn.session = { ...turn.session, id: scopedSessionId(who, turn.session.id) };
  serveTurn(deps, tel, turn, res).catch(failed);
}
