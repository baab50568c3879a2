// Where a Dynamo deployment's KV events come from, read from its file discovery backend
// (`--discovery-backend file`, the folder in DYN_FILE_KV): the kv-events publishers' ZMQ
// endpoints (event_channels), and each worker's block size from its model card (mdc). A
// deployment on etcd stores the same records under the same keys.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DYNAMO_TOPIC } from "./decode.js";

export interface DynamoEventChannel {
  /** The publisher's ZMQ endpoint as advertised. */
  endpoint: string;
  publisherId: string;
  /** The Dynamo worker id (decimal) it publishes for, from its event source record; null when not (yet) there. */
  worker: string | null;
}

export interface DynamoDiscovery {
  channels: DynamoEventChannel[];
  /** Dynamo worker id (decimal) -> its model card's kv_cache_block_size. */
  blockSizes: Record<string, number>;
  /** Dynamo worker id (decimal) -> its model card's max_num_batched_tokens (what its router queue threshold is a share of). */
  maxBatchedTokens: Record<string, number>;
}

/** Each record's text; ids exceed 2^53, so they are read from it exactly (rawIntField). */
function texts(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const f of readdirSync(dir)) {
    try {
      const text = readFileSync(join(dir, f), "utf8");
      JSON.parse(text);
      out.push(text);
    } catch {
      // a record being written right now: the next read sees it whole
    }
  }
  return out;
}

/** A JSON integer field, exactly (the first with that name). */
function rawIntField(text: string, field: string): string | null {
  return new RegExp(`"${field}"\\s*:\\s*(\\d+)`).exec(text)?.[1] ?? null;
}

export function readDynamoDiscovery(root: string): DynamoDiscovery {
  const v1 = join(root, "v1");
  const workerOf = new Map<string, string>();
  for (const text of texts(join(v1, "event_sources"))) {
    const r = JSON.parse(text) as { topic?: string };
    const publisher = rawIntField(text, "publisher_id");
    const worker = /"worker"\s*:\s*\{\s*"worker_id"\s*:\s*(\d+)/.exec(text)?.[1];
    if (r.topic === DYNAMO_TOPIC && publisher && worker) workerOf.set(publisher, worker);
  }
  const channels: DynamoEventChannel[] = [];
  for (const text of texts(join(v1, "event_channels"))) {
    const r = JSON.parse(text) as {
      topic?: string;
      transport?: { kind?: string; config?: { endpoint?: string } };
    };
    const endpoint = r.transport?.config?.endpoint;
    const publisherId = rawIntField(text, "instance_id") ?? "";
    if (r.topic === DYNAMO_TOPIC && r.transport?.kind === "Zmq" && typeof endpoint === "string") {
      channels.push({ endpoint, publisherId, worker: workerOf.get(publisherId) ?? null });
    }
  }
  const blockSizes: Record<string, number> = {};
  const maxBatchedTokens: Record<string, number> = {};
  for (const text of texts(join(v1, "mdc"))) {
    const id = rawIntField(text, "instance_id");
    const size = rawIntField(text, "kv_cache_block_size");
    const batched = rawIntField(text, "max_num_batched_tokens");
    if (id && size) blockSizes[id] = Number(size);
    if (id && batched) maxBatchedTokens[id] = Number(batched);
  }
  return { channels, blockSizes, maxBatchedTokens };
}
