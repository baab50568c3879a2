// The two workers `kvctl demo` can drive: a REAL patched SGLang server on CPU with the tiny local
// model (default), or the worker HARNESS (SGLang's cache classes, no model, no server; fast).
// The agent session (scenario.ts) sees only this interface: serve a prompt, read what the next
// prompt would find cached, flood, and a fingerprint of a context to compare before/after.
import { blockHashes, storageKeys } from "../hash/index.js";
import type { HarnessClient } from "./harness.js";
import { flood as floodServer, generate, randomTokens } from "./real-server.js";

export interface ServedPath {
  /** Prompt tokens served. */
  tokens: number;
  /** Block hashes of the prompt's whole pages, as the worker publishes them. */
  block_hashes: bigint[];
  /** HiCache storage keys of those pages. */
  storage_keys: string[];
  cached_tokens: number;
  /** Tokens of this prompt served from the host tier. */
  loaded_from_host: number;
}

export interface DemoWorker {
  readonly kind: "sglang" | "harness";
  readonly pageSize: number;
  /** A flood larger than the device pool and the host tier together. */
  readonly bigFlood: { n: number; each: number };
  serve(tokens: number[]): Promise<ServedPath>;
  /** What the next prompt with these tokens finds cached (a real server answers by serving it). */
  cached(tokens: number[]): Promise<{ cached_tokens: number; host_hit: number }>;
  flood(n: number, each: number, seed: number): Promise<{ requests: number; tokens: number }>;
  /** A value that changes if the context's KV changes: KV rows (harness) or greedy output (server). */
  fingerprint(tokens: number[]): Promise<{ what: string; value: string }>;
  shutdown(): Promise<void>;
}

export class HarnessWorker implements DemoWorker {
  readonly kind = "harness" as const;
  readonly bigFlood = { n: 240, each: 32 };
  constructor(
    private readonly h: HarnessClient,
    readonly pageSize: number,
  ) {}

  async serve(tokens: number[]): Promise<ServedPath> {
    const r = await this.h.serve(tokens);
    return {
      tokens: r.tokens,
      block_hashes: r.block_hashes,
      storage_keys: r.storage_keys,
      cached_tokens: r.cached_tokens,
      loaded_from_host: r.loaded_from_host,
    };
  }

  cached(tokens: number[]) {
    return this.h.cached(tokens);
  }

  flood(n: number, each: number, seed: number) {
    return this.h.flood(n, each, seed);
  }

  async fingerprint(tokens: number[]) {
    const hashes = await this.h.hashes(tokens);
    const kv = await this.h.kv(hashes);
    return {
      what: "KV rows",
      value: JSON.stringify([kv.blocks.map((b) => [b.k, b.v]), kv.missing.map(String)]),
    };
  }

  shutdown() {
    return this.h.shutdown();
  }
}

export class SglangWorker implements DemoWorker {
  readonly kind = "sglang" as const;
  readonly bigFlood: { n: number; each: number };
  constructor(
    private readonly baseUrl: string,
    readonly pageSize: number,
    deviceTokens: number,
    hostTokens: number,
  ) {
    const each = 256;
    this.bigFlood = { n: Math.ceil((1.5 * (deviceTokens + hostTokens)) / each), each };
  }

  async serve(tokens: number[]): Promise<ServedPath> {
    const r = await generate(this.baseUrl, tokens, 1);
    const whole = tokens.slice(0, tokens.length - (tokens.length % this.pageSize));
    return {
      tokens: tokens.length,
      block_hashes: Array.from(blockHashes(whole, { pageSize: this.pageSize })),
      storage_keys: storageKeys(whole, { pageSize: this.pageSize }),
      cached_tokens: r.meta_info.cached_tokens,
      loaded_from_host: r.meta_info.cached_tokens_details?.host ?? 0,
    };
  }

  async cached(tokens: number[]) {
    const r = await generate(this.baseUrl, tokens, 1);
    return {
      cached_tokens: r.meta_info.cached_tokens,
      host_hit: r.meta_info.cached_tokens_details?.host ?? 0,
    };
  }

  async flood(n: number, each: number, seed: number) {
    return { requests: n, tokens: await floodServer(this.baseUrl, n, each, seed) };
  }

  /** The greedy continuation of the context plus a fixed probe: equal iff the model saw the same KV. */
  async fingerprint(tokens: number[]) {
    const r = await generate(this.baseUrl, [...tokens, ...randomTokens(424242, 4)], 8);
    return { what: "greedy output", value: JSON.stringify(r.output_ids) };
  }

  async shutdown() {}
}
