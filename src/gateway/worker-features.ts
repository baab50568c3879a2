// What a worker serves beyond SGLang's own routes, found once at start. kvctl's Anthropic
// tokenize route (/kvctl/v1/messages/tokenize) exists only while kvctl is on in the worker
// (--kv-control-nats-url or --kv-control-config); a probe with an empty body tells: the route
// refuses the body (400) when it is there, and the server answers 404 when it is not.
import { MESSAGES_TOKENIZE_PATH } from "./request/token-request.js";
import { callJson } from "./upstream.js";
import type { GatewayWorker } from "./workers.js";

/** Sets w.messagesTokenize from a probe; logs once when the route is missing. */
export async function probeMessagesTokenize(w: GatewayWorker, timeoutMs: number, log: (line: string) => void): Promise<void> {
  let status: number;
  try {
    status = (await callJson(w.pool, "POST", MESSAGES_TOKENIZE_PATH, {}, timeoutMs)).status;
  } catch (e) {
    // Unknown: the route is tried per turn, and a failure there is logged per turn.
    log(`gateway: worker ${w.id}: probing ${MESSAGES_TOKENIZE_PATH} failed (${(e as Error).message}); assuming it is served`);
    return;
  }
  w.messagesTokenize = status !== 404;
  if (!w.messagesTokenize) {
    log(
      `gateway: worker ${w.id} has no ${MESSAGES_TOKENIZE_PATH} (kvctl is off in it: started without --kv-control-nats-url or --kv-control-config): ` +
        "its /v1/messages prompt ids come from /v1/tokenize on the gateway's chat rendering, kept only when they match its /v1/messages/count_tokens",
    );
  }
}
