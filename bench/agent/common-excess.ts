// The part of the ideal floor no configuration reached. The ideal cache credits a prompt with
// every page of its session's previous answer, so no run goes under it; but where the template
// renders that answer differently from how it was generated (the reasoning it drops, a tool call
// it re-serialises), no real cache can serve those pages. Per request (a session's n-th), the
// fewest tokens any run of any configuration recomputed beyond the ideal cache, summed over the
// requests, is what every configuration paid: the floor plus it is a floor the runs show is
// attainable request by request, and gap-closed shares against it say how much of the room that
// a cache could close was closed. It is printed beside the ideal floor, never instead of it.
import type { RequestRecord } from "./driver.js";

/** Tokens each request recomputed beyond the ideal cache, by `session#n`; null when the floor was not computed. */
export type RequestExcess = Map<string, number>;

export function requestExcess(records: readonly RequestRecord[]): RequestExcess | null {
  const out: RequestExcess = new Map();
  const nth = new Map<string, number>();
  for (const r of [...records].sort((a, b) => a.sentMs - b.sentMs)) {
    const n = nth.get(r.session) ?? 0;
    nth.set(r.session, n + 1);
    if (!r.ok) continue;
    if (r.idealCachedTokens === undefined) return null;
    out.set(`${r.session}#${n}`, Math.max(0, r.idealCachedTokens - r.cachedTokens));
  }
  return out;
}

/** Summed over the requests of the first run: the fewest excess tokens any run had on each (0 where
 * one did not serve it). Runs with no floor (null) say nothing; null when no run has one. */
export function commonExcess(runs: readonly (RequestExcess | null)[]): number | null {
  const all = runs.filter((r): r is RequestExcess => r !== null);
  if (all.length === 0) return null;
  let sum = 0;
  for (const [key, first] of all[0])
    sum += all.reduce((m, r) => Math.min(m, r.get(key) ?? 0), first);
  return sum;
}
