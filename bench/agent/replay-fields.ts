// What a replay of a traced run needs beside a request's prompt and output ids, measured the way
// the kvctl gateway measures it on a real worker: the reasoning span (the tokens of the text the
// worker's reasoning parser separated) and the prompt-cache marker (the prompt rendered up to the
// marker, located in the prompt by their common prefix), with the gateway's own marker code.
import { parseCacheMarkers, prefixTokenizeRequest } from "../../src/gateway/request/markers.js";
import type { RequestRecord } from "./driver.js";

async function tokenize(url: string, body: Record<string, unknown>): Promise<number[]> {
  const res = await fetch(`${url}/v1/tokenize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`/v1/tokenize answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { tokens: number[] }).tokens;
}

/** The client's TTLs as asked: the replaying gateway's config caps them as a real one would. */
const UNCAPPED = {
  inMemoryTtlSeconds: Number.POSITIVE_INFINITY,
  longTtlSeconds: Number.POSITIVE_INFINITY,
};

/** Sets the record's reasoningTokens and cacheMarker, given its prompt's ids. */
export async function replayFields(
  url: string,
  model: string,
  r: RequestRecord,
  promptIds: readonly number[],
  prefixes: Map<string, number[]>,
): Promise<void> {
  if (r.reasoningText)
    r.reasoningTokens = (
      await tokenize(url, { model, prompt: r.reasoningText, add_special_tokens: false })
    ).length;
  const body = { model, ...r.prompt };
  const spec = parseCacheMarkers("chat", body, UNCAPPED)?.specs[0];
  const req = spec ? prefixTokenizeRequest("chat", body, spec) : null;
  if (!spec || !req) return;
  // One system prompt and tool set serve many requests: rendered once each.
  const key = JSON.stringify(req);
  let prefix = prefixes.get(key);
  if (!prefix) prefixes.set(key, (prefix = await tokenize(url, req)));
  let n = 0;
  while (n < prefix.length && n < promptIds.length && prefix[n] === promptIds[n]) n++;
  r.cacheMarker = { tokens: n, ttlS: spec.ttlSeconds };
}
