// What a turn tells the agent policy beyond routing: the x-kvctl-hint header (explicit hints from
// the harness) and the token positions of the request's prompt-cache markers, measured with the
// worker's own tokenizer (the prefix up to each marker rendered by its template).
import type { TurnWorker } from "./ports.js";
import type { RequestMarkers } from "../request/shapes.js";
import type { CacheMarkers, SessionHint } from "../../contract/observations.js";
import { HINT_HEADER, HintError, parseHintHeader } from "../request/hints.js";
import type { TurnReports } from "../telemetry/reports.js";

/** The x-kvctl-hint header as observations; a bad one is counted and logged, the request still served. */
export function headerHints(
  tel: TurnReports,
  value: string | null,
  sessionId: string | null,
  known: boolean,
  /** When the hints are stamped (the gateway's clock, ms). */
  at: number,
): SessionHint[] {
  if (value === null) return [];
  if (sessionId === null) {
    tel.metrics.hints.inc({ event: "header", outcome: "no_session" });
    tel.log.warn(`gateway: ${HINT_HEADER} on a request with no session id (ignored)`);
    return [];
  }
  let hints: SessionHint[];
  try {
    hints = parseHintHeader(value, sessionId, at);
  } catch (e) {
    if (!(e instanceof HintError)) throw e;
    tel.metrics.hints.inc({ event: "header", outcome: "invalid" });
    tel.log.warn(`gateway: session ${JSON.stringify(sessionId)}: ${e.message} (ignored)`);
    return [];
  }
  for (const h of hints)
    tel.metrics.hints.inc({ event: h.event, outcome: known ? "accepted" : "unknown_session" });
  return known ? hints : [];
}

/** Token positions of the request's prompt-cache markers, from the worker's tokenizer. */
export async function cacheMarkersOf(
  tel: TurnReports,
  worker: TurnWorker,
  markers: RequestMarkers,
  prompt: number[],
): Promise<CacheMarkers> {
  const out: CacheMarkers = { breakpoints: [], errors: markers.errors };
  for (const { spec, prefix } of markers.marks) {
    if (!prefix) {
      // The whole prompt (retention, automatic caching), or a prefix the template cannot render alone.
      if (spec.messages === null || spec.messages >= markers.messageCount)
        out.breakpoints.push({ tokens: prompt.length, ttlSeconds: spec.ttlSeconds, at: spec.at });
      continue;
    }
    try {
      const t = await worker.tokenizer.tokens(prefix);
      let n = 0;
      while (n < t.length && n < prompt.length && t[n] === prompt[n]) n++;
      out.breakpoints.push({ tokens: n, ttlSeconds: spec.ttlSeconds, at: spec.at });
    } catch (e) {
      tel.log.warn(
        `gateway: tokenize for the cache marker at ${spec.at} on ${worker.id} failed: ${(e as Error).message} (marker skipped)`,
      );
    }
  }
  return out;
}
