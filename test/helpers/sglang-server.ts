// A real patched SGLang server on CPU for vitest suites (one per suite file: start it in
// beforeAll, stop it in afterAll). The launch recipe is python/kvctl_testbed/server.py, reached
// through src/demo/real-server.ts; this file only re-exports it with small request helpers.
export {
  type RealServer as SglangServer,
  type RealServerInfo as SglangServerInfo,
  type RealServerOptions as SglangServerOptions,
  startRealServer as startSglangServer,
} from "../../src/demo/real-server.js";

export interface GenerateResult {
  text: string;
  output_ids: number[];
  meta_info: {
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    cached_tokens_details: { device: number; host: number; storage?: number } | null;
    [k: string]: unknown;
  };
}

/** POST /generate, greedy, with token ids or text. */
export async function generate(
  baseUrl: string,
  input: number[] | string,
  maxNewTokens = 4,
  extra: Record<string, unknown> = {},
): Promise<GenerateResult> {
  const body = {
    ...(typeof input === "string" ? { text: input } : { input_ids: input }),
    sampling_params: { max_new_tokens: maxNewTokens, temperature: 0, ignore_eos: true },
    ...extra,
  };
  const r = await fetch(`${baseUrl}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`/generate: HTTP ${r.status}: ${await r.text()}`);
  return (await r.json()) as GenerateResult;
}

/** Token ids for tests: `n` ids from `start`, kept clear of the tiny model's special tokens (0..7). */
export function tokens(start: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => 8 + ((start + i) % 1000));
}

/** Seeded token ids (xorshift32), distinct per seed: flood traffic that shares no prefix. */
export function randomTokens(seed: number, n: number): number[] {
  let x = (seed * 2654435761) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.push(8 + ((x >>> 0) % 1000));
  }
  return out;
}

/** `n` requests of `tokensEach` fresh tokens, `concurrency` at a time; returns the prompt tokens sent. */
export async function flood(baseUrl: string, n: number, tokensEach: number, seed: number, concurrency = 4): Promise<number> {
  let next = 0;
  let sent = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) {
      await generate(baseUrl, randomTokens(seed * 100_003 + i, tokensEach), 1);
      sent += tokensEach;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return sent;
}
