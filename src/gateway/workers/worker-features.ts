// What a worker serves beyond SGLang's own routes, found once at start. kvctl's Anthropic
// tokenize route (/kvctl/v1/messages/tokenize) exists only while kvctl is on in the worker
// (--kv-control-nats-url or --kv-control-config); a probe with an empty body tells: the route
// refuses the body (400) when it is there, and the server answers 404 when it is not.
import { MESSAGES_TOKENIZE_PATH } from "../request/tokenize-call.js";
import { callJson } from "./upstream.js";
import type { Pool } from "undici";
import type { GatewayLog } from "../core/logger.js";

/** Whether the worker serves the route (a failed probe says yes: the route is then tried per turn); logs once when it does not. */
export async function probeMessagesTokenize(
  id: string,
  pool: Pool,
  timeoutMs: number,
  log: GatewayLog,
): Promise<boolean> {
  let status: number;
  try {
    status = (await callJson(pool, "POST", MESSAGES_TOKENIZE_PATH, {}, timeoutMs)).status;
  } catch (e) {
    log.warn(
      `gateway: worker ${id}: probing ${MESSAGES_TOKENIZE_PATH} failed (${(e as Error).message}); assuming it is served`,
    );
    return true;
  }
  if (status === 404) {
    log.warn(
      `gateway: worker ${id} has no ${MESSAGES_TOKENIZE_PATH} (kvctl is off in it: started without --kv-control-nats-url or --kv-control-config): ` +
        "its /v1/messages prompt ids come from /v1/tokenize on the gateway's chat rendering, kept only when they match its /v1/messages/count_tokens",
    );
  }
  return status !== 404;
}

// SGLang serves chat-stream output ids in a framed event (x-sglext-return-output-ids with
// x-sglext-ids-framed; stream-output-ids.ts) from 0.5.23 on; /server_info carries the version.
const STREAM_IDS_SINCE = [0, 5, 23];

/** Whether the worker's /server_info names an SGLang release that returns output ids on chat streams. */
export function servesStreamOutputIds(serverInfo: Record<string, unknown>): boolean {
  const v = serverInfo.version;
  if (typeof v !== "string") return false;
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(v);
  if (!m) return false;
  for (let i = 0; i < 3; i++) {
    const d = Number(m[i + 1]) - STREAM_IDS_SINCE[i];
    if (d !== 0) return d > 0;
  }
  return true;
}
