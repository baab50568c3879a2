// What a turn tells the agent policy beyond routing: the x-kvctl-hint header (explicit hints from
// the harness) and the token positions of the request's prompt-cache markers, measured with the
// worker's own tokenizer (the prefix up to each marker rendered by its template).
import type { IncomingHttpHeaders } from "node:http";
import { HINT_HEADER, HintError, parseHintHeader } from "../policy/hints.js";
import { parseCacheMarkers, prefixTokenizeRequest } from "../policy/markers.js";
import type { CacheMarkers, RouteKind, SessionHint } from "./observations.js";
import { tokenizeCall, tokenizeOn } from "./token-truth.js";
import type { TurnContext } from "./turn-context.js";
import type { GatewayWorker } from "./workers.js";

/** The x-kvctl-hint header as observations; a bad one is counted and logged, the request still served. */
export function headerHints(ctx: TurnContext, headers: IncomingHttpHeaders, sessionId: string | null, known: boolean): SessionHint[] {
  const v = headers[HINT_HEADER];
  const value = Array.isArray(v) ? v.join(",") : v;
  if (value === undefined || value.trim() === "") return [];
  if (sessionId === null) {
    ctx.metrics.hints.inc({ event: "header", outcome: "no_session" });
    ctx.log(`gateway: ${HINT_HEADER} on a request with no session id (ignored)`);
    return [];
  }
  let hints: SessionHint[];
  try {
    hints = parseHintHeader(value, sessionId, ctx.clock.now());
  } catch (e) {
    if (!(e instanceof HintError)) throw e;
    ctx.metrics.hints.inc({ event: "header", outcome: "invalid" });
    ctx.log(`gateway: session ${JSON.stringify(sessionId)}: ${e.message} (ignored)`);
    return [];
  }
  for (const h of hints) ctx.metrics.hints.inc({ event: h.event, outcome: known ? "accepted" : "unknown_session" });
  return known ? hints : [];
}

/** Token positions of the request's prompt-cache markers, from the worker's tokenizer; null without markers. */
export async function cacheMarkersOf(ctx: TurnContext, worker: GatewayWorker, route: RouteKind, body: Record<string, unknown>, prompt: number[]): Promise<CacheMarkers | null> {
  const pins = ctx.config.policies?.pins;
  const parsed = parseCacheMarkers(route, body, { inMemoryTtlSeconds: pins?.inMemoryTtlSeconds ?? 600, longTtlSeconds: pins?.longTtlSeconds ?? 86_400 });
  if (!parsed) return null;
  const out: CacheMarkers = { breakpoints: [], errors: parsed.errors };
  const messages = Array.isArray(body.messages) ? body.messages.length : 0;
  for (const spec of parsed.specs) {
    const req = prefixTokenizeRequest(route, body, spec);
    if (!req) {
      // The whole prompt (retention, automatic caching), or a prefix the template cannot render alone.
      if (spec.messages === null || spec.messages >= messages) out.breakpoints.push({ tokens: prompt.length, ttlSeconds: spec.ttlSeconds, at: spec.at });
      continue;
    }
    try {
      const t = await tokenizeOn(worker.pool, tokenizeCall(req), ctx.config.health.timeoutMs * 5);
      let n = 0;
      while (n < t.length && n < prompt.length && t[n] === prompt[n]) n++;
      out.breakpoints.push({ tokens: n, ttlSeconds: spec.ttlSeconds, at: spec.at });
    } catch (e) {
      ctx.log(`gateway: tokenize for the cache marker at ${spec.at} on ${worker.id} failed: ${(e as Error).message} (marker skipped)`);
    }
  }
  return out;
}
