// What a running SGLang server says of itself: the scheduler's sizing line in its log, and the
// HiCache counters on its /metrics (bytes and tokens it backed up give the bytes per KV token).
import { readFileSync } from "node:fs";
import type { RealServer } from "../../src/demo/real-server.js";

export interface ServerFacts {
  page_size: number;
  device_kv_tokens: number;
  host_kv_tokens: number;
  max_prefill_tokens: number;
  chunked_prefill_size: number;
  max_running_requests: number;
  kv_bytes_per_token: number;
  kv_dtype: "bfloat16" | "float32" | "float16";
  /** The server's command line (flags included). */
  command: string[];
}

function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  if (!line) throw new Error(`the server's /metrics has no ${name}`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

/** Reads a server's sizing and KV geometry; it must have backed something up to its host pool. */
export async function serverFacts(w: RealServer, kvElements: number): Promise<ServerFacts> {
  const logText = readFileSync(w.info.log_path, "utf8");
  const m =
    /max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), max_running_requests=(\d+)/.exec(
      logText,
    );
  if (!m) throw new Error(`no scheduler sizing line in ${w.info.log_path}`);
  const metrics = await (await fetch(`${w.baseUrl}/metrics`)).text();
  const bytes = metric(metrics, "sglang:hicache_backup_bytes_total");
  const tokens = metric(metrics, "sglang:hicache_backup_tokens_total");
  if (!(tokens > 0)) throw new Error("the server backed up no KV to its host pool yet");
  const perToken = bytes / tokens;
  const dtype = ({ 2: "bfloat16", 4: "float32" } as const)[perToken / kvElements];
  if (!dtype)
    throw new Error(`${perToken} bytes per KV token is no known dtype for ${kvElements} elements`);
  return {
    page_size: w.info.page_size,
    device_kv_tokens: Number(m[1]),
    host_kv_tokens: metric(metrics, "sglang:hicache_host_total_tokens"),
    chunked_prefill_size: Number(m[2]),
    max_prefill_tokens: Number(m[3]),
    max_running_requests: Number(m[4]),
    kv_bytes_per_token: perToken,
    kv_dtype: dtype,
    command: w.info.command,
  };
}
