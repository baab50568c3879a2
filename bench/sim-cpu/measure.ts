// Step times of a real SGLang CPU server, read from the server's own clock: with
// `--enable-metrics` every /generate answer carries the scheduler's `forward_entry_time` (its
// batch was formed) and `prefill_finished_time` (the prefill's result was processed), and the
// tokenizer's `request_received_ts`, `first_token_latency` and `request_finished_ts`. A batch is
// sent as one /generate call with a list of prompts, so the scheduler receives it at once and
// prefills it as one batch; every measurement checks that it did (one forward_entry_time) and that
// the prefix was served from cache, and is retried when not.
import { randomTokens } from "../../src/demo/real-server.js";

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

/** The server's time for one prefill batch of `cell`'s shape (ms), or null when it did not form. */
async function prefillOnce(url: string, cell: PrefillCell, prefix: number[], tok: Tokens) {
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
    // What the client waits beyond the forward: tokenizing, queueing, scheduling, detokenizing.
    overheadMs: ((metas[0].first_token_latency ?? 0) - (done[0] - entry)) * 1000,
  };
}

/** `repeats` timings of one prefill shape (ms), each batch checked; its prefix is cached first. */
export async function measurePrefill(
  url: string,
  cell: PrefillCell,
  repeats: number,
  tok: Tokens,
): Promise<{ ms: number[]; overheadMs: number[]; retries: number }> {
  const prefix = tok.take(cell.prefix);
  if (cell.prefix > 0) await generateBatch(url, [prefix], 1);
  const ms: number[] = [];
  const overheadMs: number[] = [];
  let retries = 0;
  while (ms.length < repeats) {
    const t = await prefillOnce(url, cell, prefix, tok);
    if (t) {
      ms.push(t.ms);
      overheadMs.push(t.overheadMs);
    } else if (++retries > 3 * repeats)
      throw new Error(
        `prefill ${JSON.stringify(cell)}: the batch did not form as one with its prefix cached`,
      );
  }
  return { ms, overheadMs, retries };
}

export interface DecodeCell {
  batch: number;
  /** KV tokens per request while it decodes (its prompt; the decoded tokens add `steps` more). */
  context: number;
}

/**
 * `repeats` timings of one decode step (ms) at `cell`'s batch size and context: the batch shares
 * a cached prefix (attention still reads every request's whole context) and decodes `steps`
 * tokens together; a step is the tokenizer's span from first to last token over steps - 1.
 */
export async function measureDecode(
  url: string,
  cell: DecodeCell,
  steps: number,
  repeats: number,
  tok: Tokens,
): Promise<number[]> {
  const own = 16;
  const prefix = tok.take(cell.context - own);
  await generateBatch(url, [prefix], 1);
  const out: number[] = [];
  for (let tries = 0; out.length < repeats; tries++) {
    if (tries > 3 * repeats)
      throw new Error(`decode ${JSON.stringify(cell)}: the batch did not form as one`);
    const metas = await generateBatch(
      url,
      Array.from({ length: cell.batch }, () => [...prefix, ...tok.take(own)]),
      steps,
    );
    const entry = metas[0].forward_entry_time;
    if (!metas.every((m) => m.forward_entry_time === entry)) continue;
    const spans = metas.map(
      (m) =>
        (m.request_finished_ts ?? 0) -
        ((m.request_received_ts ?? 0) + (m.first_token_latency ?? 0)),
    );
    const mid = [...spans].sort((a, b) => a - b)[spans.length >> 1];
    out.push((mid / (steps - 1)) * 1000);
  }
  return out;
}
