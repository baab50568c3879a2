// The front of every request when `auth` is configured: who it is (Authorization: Bearer or
// x-api-key, looked up by hash), whether its route lets it in (routes.ts), and its tenant's rate
// and concurrency. A refusal is answered here, counted by reason, and nothing behind the gate sees
// the request. The principal of an admitted request is kept for the routes that need it
// (principalOf): sessions belong to the tenant that opened them.
import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, type Registry } from "prom-client";
import { errorBody, sendJson } from "../core/errors.js";
import { flavorOfRequest } from "../request/routes.js";
import { TenantLimits } from "./limits.js";
import { routeClass } from "./routes.js";
import { ANONYMOUS, OPEN_PRINCIPAL, type Principal, type ResolvedAuth } from "./table.js";
import { onResponseClose } from "../core/response-close.js";

// Kept on the request itself: a WeakMap entry per request is an ephemeron the collector traces.
const PRINCIPAL = Symbol("kvctl.principal");
type Admitted = IncomingMessage & { [PRINCIPAL]?: Principal };

/** The principal the gate admitted req as (with auth off: allowed everything, no tenant). */
export function principalOf(req: IncomingMessage): Principal {
  return (req as Admitted)[PRINCIPAL] ?? OPEN_PRINCIPAL;
}

export type RefusalReason =
  | "missing_key"
  | "bad_header"
  | "header_too_large"
  | "unknown_key"
  | "not_admin"
  | "other_tenant"
  | "rate_limited"
  | "too_many_concurrent";

interface Refusal {
  status: number;
  reason: RefusalReason;
  message: string;
  field: string | null;
}

const BEARER = /^Bearer ([\x21-\x7e]+)$/i;
const PRINTABLE = /^[\x21-\x7e]+$/;

export class AuthGate {
  readonly refused: Counter<"reason">;
  private readonly limits = new Map<string, TenantLimits>();

  constructor(
    readonly auth: ResolvedAuth,
    registry: Registry,
    now: () => number = Date.now,
  ) {
    this.refused = new Counter({
      name: "kvctl_gateway_auth_refused_total",
      help: "Requests refused by authentication, authorization or tenant limits, by reason",
      labelNames: ["reason"],
      registers: [registry],
    });
    for (const [id, t] of auth.tenants)
      if (t.requestsPerSecond !== undefined || t.maxConcurrent !== undefined)
        this.limits.set(id, new TenantLimits(t, now));
  }

  /** Counts a refusal the routes behind the gate make (a session of another tenant). */
  count(reason: RefusalReason): void {
    this.refused.inc({ reason });
  }

  /** Admits req (true) or answers it with the refusal (false). */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    const url = req.url ?? "/";
    const cls = routeClass(url);
    const who = this.identify(req, cls);
    if ("status" in who) return this.refuse(req, res, who);
    if (cls === "admin" && !who.admin)
      return this.refuse(req, res, {
        status: 403,
        reason: "not_admin",
        message: "this route needs the admin key",
        field: null,
      });
    (req as Admitted)[PRINCIPAL] = who;
    if (cls === "client" && who.tenant !== null) {
      const lim = this.limits.get(who.tenant);
      const over = lim?.take();
      if (over) {
        const why = over.reason === "rate_limited" ? "request rate" : "concurrent requests";
        return this.refuse(
          req,
          res,
          {
            status: 429,
            reason: over.reason,
            message: `tenant '${who.tenant}' is over its limit of ${why}`,
            field: null,
          },
          { "retry-after": String(over.retryAfterS) },
        );
      }
      if (lim) onResponseClose(res, () => lim.done());
    }
    return true;
  }

  private identify(req: IncomingMessage, cls: "open" | "client" | "admin"): Principal | Refusal {
    const key = this.keyOf(req);
    if (typeof key === "object") return key;
    if (key === undefined) {
      if (cls === "open" || (cls === "client" && !this.auth.clientKeys)) return ANONYMOUS;
      return {
        status: 401,
        reason: "missing_key",
        message: "this route needs an API key (Authorization: Bearer <key> or x-api-key)",
        field: "authorization",
      };
    }
    return (
      this.auth.keys.lookup(key) ?? {
        status: 401,
        reason: "unknown_key",
        message: "invalid API key",
        field: "authorization",
      }
    );
  }

  /** The key the request's headers name (undefined: none), or why they are refused. */
  private keyOf(req: IncomingMessage): string | undefined | Refusal {
    const auth = req.headers.authorization;
    const xkey = req.headers["x-api-key"];
    let key: string | undefined;
    if (auth !== undefined) {
      if (Buffer.byteLength(auth) > this.auth.maxHeaderBytes)
        return tooLarge("authorization", this.auth.maxHeaderBytes);
      const m = BEARER.exec(auth);
      if (!m)
        return badHeader(
          "authorization",
          "authorization header: expected 'Bearer <key>' (printable ASCII key)",
        );
      key = m[1];
    }
    if (xkey === undefined) return key;
    const x = Array.isArray(xkey) ? xkey.join(",") : xkey;
    if (Buffer.byteLength(x) > this.auth.maxHeaderBytes)
      return tooLarge("x-api-key", this.auth.maxHeaderBytes);
    if (Array.isArray(xkey) || !PRINTABLE.test(x))
      return badHeader("x-api-key", "x-api-key header: expected one key of printable ASCII");
    if (key !== undefined && key !== x)
      return badHeader("x-api-key", "authorization and x-api-key headers name different keys");
    return x;
  }

  private refuse(
    req: IncomingMessage,
    res: ServerResponse,
    r: Refusal,
    headers: Record<string, string> = {},
  ): false {
    this.refused.inc({ reason: r.reason });
    const type =
      r.status === 401 || r.status === 431
        ? "authentication_error"
        : r.status === 403
          ? "permission_error"
          : "rate_limit_error";
    if (r.status === 401) headers["www-authenticate"] = "Bearer";
    // The body may still be on its way: the connection closes after the answer.
    sendJson(
      res,
      r.status,
      errorBody(flavorOfRequest(req.url ?? "/", req.headers), type, r.message, r.field),
      { ...headers, connection: "close" },
    );
    return false;
  }
}

const tooLarge = (field: string, max: number): Refusal => ({
  status: 431,
  reason: "header_too_large",
  message: `${field} header is longer than ${max} bytes`,
  field,
});

const badHeader = (field: string, message: string): Refusal => ({
  status: 401,
  reason: "bad_header",
  message,
  field,
});
