// POST /kvctl/v1/sessions/{id}/events: explicit hints from a harness (tool_start, tool_end, idle,
// close, rewrite), fed to the policy as SessionHint observations. A session the store does not
// know is a 404; a bad body a 400 naming the field; both counted, neither changes anything. A
// tenant key names its own tenant's sessions (auth/ownership.ts): another tenant's id is an
// unknown session to it, answered as one. A key twice in one object is refused naming it, as the
// control plane refuses it, rather than letting the last one win.
import type { FastifyInstance } from "fastify";
import { fieldPath, JsonDuplicateKeyError, parseJson } from "../../protocol/index.js";
import { principalOf } from "../auth/gate.js";
import { mayUse, scopedSessionId } from "../auth/ownership.js";
import { HintError, parseHintBody } from "../request/hints.js";
import { errorBody } from "../core/errors.js";
import { MAX_SESSION_ID_BYTES } from "../request/session-id.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "../turn/turn-deps.js";
import { requestFields } from "./request-log.js";

/** The dotted path of a key that appears twice in one object of the (valid JSON) body, else null. */
function duplicateKey(raw: Buffer): string | null {
  try {
    parseJson(raw);
  } catch (e) {
    if (e instanceof JsonDuplicateKeyError) return fieldPath(e.path);
  }
  return null;
}

export const HINTS_ROUTE = "/kvctl/v1/sessions/:id/events";

export function registerHintsRoute(app: FastifyInstance, deps: TurnDeps, tel: Telemetry): void {
  app.post<{ Params: { id: string } }>(HINTS_ROUTE, async (req, reply) => {
    const { metrics } = tel;
    const named = req.params.id;
    const fail = (
      status: number,
      outcome: string,
      event: string,
      message: string,
      param: string | null,
    ) => {
      metrics.hints.inc({ event, outcome });
      return reply
        .code(status)
        .header("content-type", "application/json")
        .send(
          errorBody(
            "openai",
            status === 404 ? "not_found" : "invalid_request_error",
            message,
            param,
          ),
        );
    };
    if (named === "" || Buffer.byteLength(named) > MAX_SESSION_ID_BYTES)
      return fail(400, "invalid", "?", `session id must be 1-${MAX_SESSION_ID_BYTES} bytes`, "id");
    const who = principalOf(req.raw);
    const id = scopedSessionId(who, named);
    // The fastify door's body: its bytes and their JSON (server.ts).
    const body = req.body as { raw: Buffer; json: unknown } | undefined;
    const twice = body?.raw.length ? duplicateKey(body.raw) : null;
    if (twice) return fail(400, "invalid", "?", `duplicate key ${twice}`, twice);
    let hint;
    try {
      hint = parseHintBody(body?.json, id, tel.clock.now());
    } catch (e) {
      if (!(e instanceof HintError)) throw e;
      return fail(400, "invalid", "?", e.message, e.field);
    }
    await deps.recording.get(id);
    const rec = await deps.sessions.get(id);
    // A record in the caller's namespace it did not open (auth/ownership.ts) is answered as unknown too.
    const refused = rec !== null && !mayUse(who, rec);
    if (refused) deps.auth?.count("other_tenant");
    if (!rec || refused) {
      tel.log.info(
        `gateway: hint ${hint.event} for unknown session ${JSON.stringify(id)} (ignored${refused ? "; another tenant's record" : ""})`,
        requestFields(req.raw),
      );
      return fail(404, "unknown_session", hint.event, `no session ${JSON.stringify(named)}`, "id");
    }
    metrics.hints.inc({ event: hint.event, outcome: "accepted" });
    deps.observe(hint);
    return reply.code(202).send({ accepted: true, session: named, event: hint.event });
  });
}
