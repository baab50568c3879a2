// What bench:agent reads besides the driver's records: a flood of unrelated prompts after the
// trace, the gateway's command and pin counters, HiCache's L3 counters on the workers, and the
// ideal-cache floor of a trace.
import { blockHashes } from "../../src/hash/index.js";
import type { RealServer } from "../../src/demo/real-server.js";
import type { RequestRecord } from "./driver.js";
import { replayFields } from "./replay-fields.js";
import { rng } from "./workload.js";

export async function flood(url: string, n: number, model: string, seed: number): Promise<number> {
  const r = rng(seed + 1);
  let ok = 0;
  const words = "alpha beta gamma delta token block page cache host device plan step result".split(
    " ",
  );
  await Promise.all(
    Array.from({ length: 4 }, async (_, lane) => {
      for (let i = lane; i < n; i += 4) {
        const text = Array.from({ length: 600 }, () => words[Math.floor(r() * words.length)]).join(
          " ",
        );
        const res = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model,
            messages: [{ role: "user", content: text }],
            max_tokens: 4,
          }),
        });
        await res.text();
        if (res.status === 200) ok++;
      }
    }),
  );
  return ok;
}

/** Program admission's retention as the gateway counted it: decisions by action, their outcomes,
 * the tool gaps predicted at each decision and measured at each return, and the sessions closed on
 * the workers' session radix caches, by why. */
export interface RetentionReport {
  decisions: Record<string, number>;
  outcomes: Record<string, number>;
  gap_predicted: { count: number; mean_s: number | null };
  gap_actual: { count: number; mean_s: number | null };
  radix_releases: Record<string, number>;
}

export interface Scraped {
  commands: Record<string, number>;
  pinPeak: number;
  pinned: { hit: number; wasted: number };
  retention: RetentionReport;
}

export async function scrape(url: string): Promise<Scraped> {
  return parseGatewayMetrics(await (await fetch(`${url}/metrics`)).text());
}

/** What the bench reads from a gateway's /metrics text. */
export function parseGatewayMetrics(text: string): Scraped {
  const commands: Record<string, number> = {};
  let pinPeak = 0;
  // Every block a policy pinned: served from cache while pinned (hit) or never (wasted), whether
  // its pins went during the run or still hold at its end.
  const pinned = { hit: 0, wasted: 0 };
  const retention: RetentionReport = {
    decisions: {},
    outcomes: {},
    gap_predicted: { count: 0, mean_s: null },
    gap_actual: { count: 0, mean_s: null },
    radix_releases: {},
  };
  const gaps = { predicted: { sum: 0, count: 0 }, actual: { sum: 0, count: 0 } };
  for (const line of text.split("\n")) {
    const m = /^kvctl_gateway_commands_(sent|acked|failed|dropped)_total\{([^}]*)\} (\S+)/.exec(
      line,
    );
    if (m) {
      const labels = Object.fromEntries(
        [...m[2].matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]),
      );
      const key = `${labels.type ?? "?"}:${m[1]}${labels.status ? `:${labels.status}` : ""}`;
      commands[key] = (commands[key] ?? 0) + Number(m[3]);
    }
    const p = /^kvctl_policy_pin_budget_peak_blocks(\{[^}]*\})? (\S+)/.exec(line);
    if (p) pinPeak = Math.max(pinPeak, Number(p[2]));
    const o =
      /^kvctl_policy_pinned_blocks_(?:total|open)\{[^}]*outcome="(hit|wasted)"[^}]*\} (\S+)/.exec(
        line,
      );
    if (o) pinned[o[1] as "hit" | "wasted"] += Number(o[2]);
    countRetention(retention, line);
    const g =
      /^kvctl_program_gap_seconds_(sum|count)\{[^}]*kind="(predicted|actual)"[^}]*\} (\S+)/.exec(
        line,
      );
    if (g) gaps[g[2] as "predicted" | "actual"][g[1] as "sum" | "count"] += Number(g[3]);
  }
  const gap = (x: { sum: number; count: number }) => ({
    count: x.count,
    mean_s: x.count ? +(x.sum / x.count).toFixed(2) : null,
  });
  retention.gap_predicted = gap(gaps.predicted);
  retention.gap_actual = gap(gaps.actual);
  return { commands, pinPeak, pinned, retention };
}

/** The program-retention counters (decisions, outcomes, radix releases) a line adds to. */
function countRetention(retention: RetentionReport, line: string): void {
  countInto(
    retention.decisions,
    /^kvctl_program_retention_decisions_total\{([^}]*)\} (\S+)/.exec(line),
    ["action"],
  );
  countInto(
    retention.outcomes,
    /^kvctl_program_retention_outcomes_total\{([^}]*)\} (\S+)/.exec(line),
    ["action", "outcome"],
  );
  countInto(
    retention.radix_releases,
    /^kvctl_gateway_radix_session_releases_total\{([^}]*)\} (\S+)/.exec(line),
    ["reason", "outcome"],
  );
}

/** Adds a counter line's value under its labels `keys` joined by ":" (summed over the others, the worker's). */
function countInto(into: Record<string, number>, m: RegExpExecArray | null, keys: string[]): void {
  if (!m) return;
  const labels = Object.fromEntries(
    [...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]),
  );
  const key = keys.map((k) => labels[k] ?? "?").join(":");
  into[key] = (into[key] ?? 0) + Number(m[2]);
}

/** What HiCache's L3 did on the workers (SGLang's own counters, summed over both workers):
 * tokens backed up to storage, tokens a storage query found, tokens prefetched into the host
 * tier, found tokens that never became cache hits, by SGLang's reason (deadline, host
 * capacity, below threshold, ...), and device tokens evicted with no host copy (so lost to every
 * tier), by reason. Read right after the trace, before the flood. */
export interface L3Report {
  backed_up: number;
  query_hit: number;
  prefetched: number;
  unfulfilled: Record<string, number>;
  deferred: Record<string, number>;
  dropped: Record<string, number>;
}

export async function scrapeL3(workers: RealServer[]): Promise<L3Report> {
  const out: L3Report = {
    backed_up: 0,
    query_hit: 0,
    prefetched: 0,
    unfulfilled: {},
    deferred: {},
    dropped: {},
  };
  for (const w of workers) {
    const text = await (await fetch(`${w.baseUrl}/metrics`)).text();
    for (const line of text.split("\n")) {
      const m =
        /^sglang:(backuped_tokens_total|storage_prefetch_hit_tokens_total|prefetched_tokens_total|storage_prefetch_unfulfilled_tokens_total|storage_prefetch_deferred_tokens_total|hicache_dropped_tokens_total)\{([^}]*)\} (\S+)/.exec(
          line,
        );
      if (!m) continue;
      const n = Number(m[3]);
      const reason = /reason="([^"]*)"/.exec(m[2])?.[1] ?? "?";
      if (m[1] === "backuped_tokens_total") out.backed_up += n;
      else if (m[1] === "storage_prefetch_hit_tokens_total") out.query_hit += n;
      else if (m[1] === "prefetched_tokens_total") out.prefetched += n;
      else if (m[1] === "storage_prefetch_unfulfilled_tokens_total")
        out.unfulfilled[reason] = (out.unfulfilled[reason] ?? 0) + n;
      else if (m[1] === "hicache_dropped_tokens_total")
        out.dropped[reason] = (out.dropped[reason] ?? 0) + n;
      else out.deferred[reason] = (out.deferred[reason] ?? 0) + n;
    }
  }
  return out;
}

/** What the counters grew by between two reads (the workers may have served an earlier
 * configuration, emptied by a flush that leaves SGLang's counters as they were). */
export function l3Since(after: L3Report, before: L3Report): L3Report {
  const sub = (a: Record<string, number>, b: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(a)
        .map(([k, n]) => [k, n - (b[k] ?? 0)])
        .filter(([, n]) => n !== 0),
    );
  return {
    backed_up: after.backed_up - before.backed_up,
    query_hit: after.query_hit - before.query_hit,
    prefetched: after.prefetched - before.prefetched,
    unfulfilled: sub(after.unfulfilled, before.unfulfilled),
    deferred: sub(after.deferred, before.deferred),
    dropped: sub(after.dropped, before.dropped),
  };
}

/**
 * Prefill tokens an ideal cache would still compute: every sequence a worker computed in the trace
 * (each prompt, and after it the tokens its answer generated), kept forever on one worker, reuse at
 * page granularity. Prompts are tokenized by a worker of the run (its chat template), each checked
 * against the prompt_tokens the worker reported. Where the worker returned the generated ids, the
 * next prompt hits an answer's pages exactly as far as it replays them (a template that drops the
 * reasoning leaves the generated sequence at the answer's first token); where it did not, the floor
 * credits every generated token to a prompt that continues the previous one, so no run goes under it.
 */
export async function idealRecompute(
  records: RequestRecord[],
  url: string,
  model: string,
  pageSize: number,
): Promise<IdealFloor> {
  const served = [...records].filter((r) => r.ok).sort((a, b) => a.sentMs - b.sentMs);
  const tokens: number[][] = [];
  const prefixes = new Map<string, number[]>();
  let mismatched = 0;
  for (const r of served) {
    const res = await fetch(`${url}/v1/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, ...r.prompt }),
    });
    const ids = ((await res.json()) as { tokens: number[] }).tokens;
    tokens.push(ids);
    // Kept on the record, so the run's trace carries what a replay of it sends.
    r.promptIds = ids;
    await replayFields(url, model, r, ids, prefixes);
    if (ids.length !== r.promptTokens) mismatched++;
  }
  return { ...creditIdeal(served, tokens, pageSize), mismatched };
}

/** The ideal cache over requests in the order they were sent, each with its prompt's tokens: sets
 * each request's `idealCachedTokens` and counts what the cache would still compute. */
export function creditIdeal(
  served: RequestRecord[],
  tokens: number[][],
  pageSize: number,
): Omit<IdealFloor, "mismatched"> {
  const seen = new Set<bigint>();
  // Each session's latest request whose generated ids are unknown: its answer is credited whole.
  const latest = new Map<string, { tokens: number[]; completion: number }>();
  const floor = { recomputed: 0, exact: 0, served: served.length, undercut: 0 };
  served.forEach((r, i) => {
    const t = tokens[i];
    // One chain over the prompt and what it generated: its first pages are the prompt's own.
    const hashes = blockHashes(r.outputIds ? [...t, ...r.outputIds] : t, { pageSize });
    const promptPages = Math.floor(t.length / pageSize);
    let hit = 0;
    while (hit < promptPages && seen.has(hashes[hit])) hit++;
    for (const h of hashes) seen.add(h);
    r.idealCachedTokens = Math.min(
      Math.max(hit * pageSize, answerReach(latest.get(r.session), t, pageSize)),
      t.length - 1,
    );
    floor.recomputed += t.length - r.idealCachedTokens;
    if (r.cachedTokens > r.idealCachedTokens) floor.undercut++;
    if (r.outputIds) {
      floor.exact++;
      latest.delete(r.session);
    } else latest.set(r.session, { tokens: t, completion: r.completionTokens });
  });
  return floor;
}

export interface IdealFloor {
  recomputed: number;
  /** Prompts whose tokenization here differs in length from what the worker reported. */
  mismatched: number;
  /** Requests whose generated ids the worker returned (their answers credited exactly), of `served`. */
  exact: number;
  served: number;
  /** Requests the run served more of from cache than the ideal cache would: a floor that is not one. */
  undercut: number;
}

/**
 * How far a prompt can hit through the pages of its session's previous answer when its generated
 * ids are unknown: SGLang caches the generated tokens after their prompt, and where the chat
 * template renders the answer as it was generated, the next prompt hits them too. Every generated
 * token (its whole pages) is credited to a prompt that continues the previous one.
 */
export function answerReach(
  prev: { tokens: number[]; completion: number } | undefined,
  tokens: number[],
  pageSize: number,
): number {
  if (!prev || prev.tokens.length > tokens.length) return 0;
  for (let i = 0; i < prev.tokens.length; i++) if (prev.tokens[i] !== tokens[i]) return 0;
  return Math.floor((prev.tokens.length + prev.completion) / pageSize) * pageSize;
}
