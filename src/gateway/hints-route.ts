// POST /kvctl/v1/sessions/{id}/events: explicit hints from a harness (tool_start, tool_end, idle,
// close, rewrite), fed to the policy as SessionHint observations. A session the store does not
// know is a 404; a bad body a 400 naming the field; both counted, neither changes anything. Under
// auth a session of another tenant and an unknown one are both 403 (auth/ownership.ts).
import type { FastifyInstance } from "fastify";
import { principalOf } from "./auth/gate.js";
import { mayUse, SESSION_REFUSED } from "./auth/ownership.js";
import { HintError, parseHintBody } from "./request/hints.js";
import { errorBody } from "./errors.js";
import { MAX_SESSION_ID_BYTES } from "./session-id.js";
import type { TurnContext } from "./turn-context.js";
import { requestFields } from "./request-log.js";

export const HINTS_ROUTE = "/kvctl/v1/sessions/:id/events";

export function registerHintsRoute(app: FastifyInstance, ctx: TurnContext): void {
  app.post<{ Params: { id: string } }>(HINTS_ROUTE, async (req, reply) => {
    const { metrics } = ctx;
    const id = req.params.id;
    const fail = (status: number, outcome: string, event: string, message: string, param: string | null) => {
      metrics.hints.inc({ event, outcome });
      return reply.code(status).header("content-type", "application/json").send(errorBody("openai", status === 404 ? "not_found" : "invalid_request_error", message, param));
    };
    if (id === "" || Buffer.byteLength(id) > MAX_SESSION_ID_BYTES) return fail(400, "invalid", "?", `session id must be 1-${MAX_SESSION_ID_BYTES} bytes`, "id");
    const json = (req.body as { json?: unknown } | undefined)?.json;
    let hint;
    try {
      hint = parseHintBody(json, id, ctx.clock.now());
    } catch (e) {
      if (!(e instanceof HintError)) throw e;
      return fail(400, "invalid", "?", e.message, e.field);
    }
    await ctx.recording.get(id);
    const rec = await ctx.sessions.get(id);
    const who = principalOf(req.raw);
    // Under auth a client key gets the same 403 for an unknown id and another tenant's session (auth/ownership.ts).
    if (ctx.auth && !who.admin && (!rec || !mayUse(who, rec))) {
      ctx.auth.count("other_tenant");
      ctx.log.warn(`gateway: hint ${hint.event} for session ${JSON.stringify(id)} refused (${rec ? "another tenant's" : "unknown"})`, requestFields(req.raw));
      metrics.hints.inc({ event: hint.event, outcome: rec ? "other_tenant" : "unknown_session" });
      return reply.code(403).header("content-type", "application/json").send(errorBody("openai", "permission_error", SESSION_REFUSED, "id"));
    }
    if (!rec) {
      ctx.log.info(`gateway: hint ${hint.event} for unknown session ${JSON.stringify(id)} (ignored)`, requestFields(req.raw));
      return fail(404, "unknown_session", hint.event, `no session ${JSON.stringify(id)}`, "id");
    }
    metrics.hints.inc({ event: hint.event, outcome: "accepted" });
    ctx.observe(hint);
    return reply.code(202).send({ accepted: true, session: id, event: hint.event });
  });
}
