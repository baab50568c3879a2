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
