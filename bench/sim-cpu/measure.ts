// Step times of a real SGLang CPU server, read from the server's own clock: with
// `--enable-metrics` every /generate answer carries the scheduler's `forward_entry_time` (its
// batch was formed) and `prefill_finished_time` (the prefill's result was processed), and the
// tokenizer's `request_received_ts`, `first_token_latency` and `request_finished_ts`. A batch is
// sent as one /generate call with a list of prompts, so the scheduler receives it at once and
// prefills it as one batch; every sample checks that it did (one forward_entry_time) and that its
// prefix was served from cache (sweep.ts takes it again when not).
import { randomTokens } from "../../src/demo/real-server.js";
import { median } from "./fit.js";

interface Meta {
  cached_tokens: number;
  prompt_tokens: number;
  completion_tokens: number;
  forward_entry_time?: number;
  prefill_finished_time?: number;
  request_received_ts?: number;
  first_token_latency?: number;
  request_finished_ts?: number;
}

/** POST /generate with one or several prompts of token ids, greedy, `newTokens` generated each. */
export async function generateBatch(
  url: string,
  prompts: number[][],
  newTokens: number,
): Promise<Meta[]> {
  const r = await fetch(`${url}/generate`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      input_ids: prompts.length === 1 ? prompts[0] : prompts,
      sampling_params: { max_new_tokens: newTokens, temperature: 0, ignore_eos: true },
    }),
  });
  if (!r.ok) throw new Error(`/generate: HTTP ${r.status}: ${(await r.text()).slice(0, 300)}`);
  const body = (await r.json()) as { meta_info: Meta } | { meta_info: Meta }[];
  return (Array.isArray(body) ? body : [body]).map((b) => b.meta_info);
}

/** Distinct token ids for each call: a counter seeds the generator, so no two prompts share a page. */
export class Tokens {
  private next: number;
  constructor(seed: number) {
    this.next = seed;
  }
  take(n: number): number[] {
    // Ids 3..1002: clear of the tiny model's special tokens (bos 0, eos 1, pad 2).
    return randomTokens(this.next++, n).map((t) => 3 + (t % 1000));
  }
}

export interface PrefillCell {
  batch: number;
  extend: number;
  prefix: number;
}

export interface DecodeCell {
  batch: number;
  /** KV tokens per request while it decodes (its prompt; the decoded tokens add `steps` more). */
  context: number;
}

/**
 * Shared prefixes by length, each cached on the server once and again only when it was evicted
 * (a sample whose cached tokens fall short asks for it again).
 */
export class Prefixes {
  private readonly ids = new Map<number, number[]>();
  constructor(
    private readonly url: string,
    private readonly tok: Tokens,
  ) {}
  async get(len: number, reseed = false): Promise<number[]> {
    let ids = this.ids.get(len);
    if (!ids || reseed) {
      ids = this.tok.take(len);
      this.ids.set(len, ids);
      if (len > 0) await generateBatch(this.url, [ids], 1);
    }
    return ids;
  }
}

export interface PrefillSample {
  ms: number;
  /** What the client waited beyond the forward: tokenizing, queueing, scheduling, detokenizing. */
  overheadMs: number;
}

/** One prefill batch of `cell`'s shape timed by the server, or null when it did not form as one
 * batch with its prefix served from cache. */
export async function prefillSample(
  url: string,
  cell: PrefillCell,
  prefix: number[],
  tok: Tokens,
): Promise<PrefillSample | null> {
  const metas = await generateBatch(
    url,
    Array.from({ length: cell.batch }, () => [...prefix, ...tok.take(cell.extend)]),
    1,
  );
  const entry = metas[0].forward_entry_time;
  const done = metas.map((m) => m.prefill_finished_time ?? 0);
  if (entry === undefined || done.some((d) => d <= 0))
    throw new Error("the server reports no forward_entry_time: is --enable-metrics on?");
  const oneBatch = metas.every((m) => m.forward_entry_time === entry);
  const cached = metas.every((m) => m.cached_tokens === cell.prefix);
  if (!oneBatch || !cached) return null;
  return {
    ms: (Math.max(...done) - entry) * 1000,
    overheadMs: ((metas[0].first_token_latency ?? 0) - (done[0] - entry)) * 1000,
  };
}

/** Tokens of its own each decoding request has after the shared prefix. */
export const OWN_TOKENS = 16;

/**
 * One decode step (ms) at `cell`'s batch size and context: the batch shares a cached prefix
 * (attention still reads every request's whole context) and decodes `steps` tokens together; a
 * step is the tokenizer's span from first to last token over steps - 1. Null when the batch did
 * not form as one or its prefix was not served from cache.
 */
export async function decodeSample(
  url: string,
  cell: DecodeCell,
  prefix: number[],
  steps: number,
  tok: Tokens,
): Promise<number | null> {
  const metas = await generateBatch(
    url,
    Array.from({ length: cell.batch }, () => [...prefix, ...tok.take(OWN_TOKENS)]),
    steps,
  );
  const entry = metas[0].forward_entry_time;
  if (!metas.every((m) => m.forward_entry_time === entry && m.cached_tokens === prefix.length))
    return null;
  const spans = metas.map(
    (m) =>
      (m.request_finished_ts ?? 0) - ((m.request_received_ts ?? 0) + (m.first_token_latency ?? 0)),
  );
  return (median(spans) / (steps - 1)) * 1000;
}
