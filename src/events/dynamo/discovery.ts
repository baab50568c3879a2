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
}

export interface DynamoDiscovery {
  channels: DynamoEventChannel[];
  /** Dynamo worker id (decimal) -> its model card's kv_cache_block_size. */
  blockSizes: Record<string, number>;
}

function records(dir: string): unknown[] {
  if (!existsSync(dir)) return [];
  const out: unknown[] = [];
  for (const f of readdirSync(dir)) {
    try {
      out.push(JSON.parse(readFileSync(join(dir, f), "utf8")));
    } catch {
      // a record being written right now, or not one of ours: the next read sees it whole
    }
  }
  return out;
}

/** A JSON integer field, exactly: instance ids exceed 2^53, so they are read from the raw text. */
function rawIntField(text: string, field: string): string | null {
  return new RegExp(`"${field}"\\s*:\\s*(\\d+)`).exec(text)?.[1] ?? null;
}

export function readDynamoDiscovery(root: string): DynamoDiscovery {
  const v1 = join(root, "v1");
  const channels: DynamoEventChannel[] = [];
  for (const r of records(join(v1, "event_channels")) as { topic?: string; instance_id?: number; transport?: { kind?: string; config?: { endpoint?: string } } }[]) {
    const endpoint = r.transport?.config?.endpoint;
    if (r.topic === DYNAMO_TOPIC && r.transport?.kind === "Zmq" && typeof endpoint === "string") {
      channels.push({ endpoint, publisherId: String(r.instance_id ?? "") });
    }
  }
  const blockSizes: Record<string, number> = {};
  const mdc = join(v1, "mdc");
  if (existsSync(mdc)) {
    for (const f of readdirSync(mdc)) {
      let text: string;
      try {
        text = readFileSync(join(mdc, f), "utf8");
      } catch {
        continue;
      }
      const id = rawIntField(text, "instance_id");
      const size = rawIntField(text, "kv_cache_block_size");
      if (id && size) blockSizes[id] = Number(size);
    }
  }
  return { channels, blockSizes };
}
