// What a worker's /server_info says about how it names its KV blocks, checked against what the
// addon can reproduce. A worker whose scheme we cannot reproduce is refused at start: routing on
// hashes that do not match the worker's own would silently score every request as a miss.
import type { BlockHashOptions } from "../../hash/index.js";

/** A request's own seeds of the chain, on top of its worker's scheme. */
export interface HashNamespace {
  /** The request's `cache_salt` (SGLang seeds the event chain with it). */
  cacheSalt: string | null;
  /** The request's `extra_key`. */
  extraKey: string | null;
}

export interface HashScheme {
  /** Tokens per page (the KV-event block size). */
  pageSize: number;
  /** --kv-events-config "format": SGLang's own or Dynamo's namespacing. */
  eventFormat: "sglang" | "dynamo";
  /** EAGLE speculative decoding keys the radix tree by token bigrams. */
  bigram: boolean;
}

export interface WorkerAdvertisement {
  scheme: HashScheme;
  /** The KV-event PUB and replay endpoints it advertises, with a wildcard host replaced by its URL's host. */
  events: string | null;
  replay: string | null;
  topic: string;
  modelPath: string | null;
  /** --enable-cache-report: usage carries prompt_tokens_details.cached_tokens (cache-hit metrics need it). */
  cacheReport: boolean;
}

export class WorkerSchemeError extends Error {
  override name = "WorkerSchemeError";
}

const WILDCARD = new Set(["*", "0.0.0.0", "::", "[::]", ""]);

function eventsConfig(raw: unknown): Record<string, unknown> | null {
  if (raw == null || raw === "") return null;
  if (typeof raw === "object") return raw as Record<string, unknown>;
  if (typeof raw !== "string") return null;
  try {
    const v = JSON.parse(raw);
    return v && typeof v === "object" ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Reads the fields that decide block naming from a /server_info body; throws WorkerSchemeError. */
export function schemeFromServerInfo(
  worker: string,
  workerUrl: string,
  info: Record<string, unknown>,
): WorkerAdvertisement {
  const fail = (why: string): never => {
    throw new WorkerSchemeError(
      `worker ${worker} (${workerUrl}): ${why}; refusing it (its block hashes cannot be reproduced)`,
    );
  };
  const kv = (info.kv_events ?? null) as Record<string, unknown> | null;
  const pageSize = kv?.block_size ?? info.page_size;
  if (typeof pageSize !== "number" || !Number.isInteger(pageSize) || pageSize < 1) {
    fail(`/server_info has no usable page size (page_size=${JSON.stringify(info.page_size)})`);
  }
  if (kv && info.page_size !== undefined && kv.block_size !== info.page_size) {
    fail(
      `kv_events.block_size ${JSON.stringify(kv.block_size)} differs from page_size ${JSON.stringify(info.page_size)}`,
    );
  }
  const cfg = eventsConfig(info.kv_events_config);
  const format = cfg?.format ?? "default";
  if (format !== "default" && format !== "dynamo")
    fail(`kv_events_config.format '${String(format)}' is not one we hash`);
  if (info.enable_lora === true) {
    fail("LoRA is enabled: its event hashes are namespaced by adapter ids the gateway cannot see");
  }
  const spec = info.speculative_algorithm;
  const bigram = typeof spec === "string" && spec.toUpperCase().startsWith("EAGLE");
  if (info.disable_radix_cache === true)
    fail("the radix cache is disabled (no prefix reuse to route on)");
  if (kv && kv.dp_size !== undefined && kv.dp_size !== 1)
    fail(`dp_size ${String(kv.dp_size)}: one event socket per DP rank is not supported yet`);

  const host = new URL(workerUrl).hostname;
  const endpoint = (port: unknown): string | null => {
    if (typeof port !== "number") return null;
    const h =
      typeof kv?.endpoint_host === "string" && !WILDCARD.has(kv.endpoint_host)
        ? kv.endpoint_host
        : host;
    return `tcp://${h.includes(":") && !h.startsWith("[") ? `[${h}]` : h}:${port}`;
  };
  return {
    scheme: {
      pageSize: pageSize as number,
      eventFormat: format === "dynamo" ? "dynamo" : "sglang",
      bigram,
    },
    events: kv ? endpoint(kv.endpoint_port_base) : null,
    replay: kv ? endpoint(kv.replay_endpoint_port_base) : null,
    topic: typeof kv?.topic === "string" ? kv.topic : "",
    modelPath: typeof info.model_path === "string" ? info.model_path : null,
    cacheReport: info.enable_cache_report === true,
  };
}

/** A scheme's identity: workers with equal keys name equal prompts with equal hashes. */
export function schemeKey(s: HashScheme): string {
  return `${s.pageSize}/${s.eventFormat}/${s.bigram ? "bigram" : "unigram"}`;
}

/** The addon's options for a request's hashes in this scheme (cache_salt / extra_key from its body). */
export function hashOptions(
  s: HashScheme,
  ns: { cacheSalt: string | null; extraKey: string | null },
): BlockHashOptions {
  return {
    pageSize: s.pageSize,
    bigram: s.bigram,
    cacheSalt: ns.cacheSalt,
    extraKey: ns.extraKey,
    eventFormat: s.eventFormat,
    extraKeyIsLora: false,
  };
}
