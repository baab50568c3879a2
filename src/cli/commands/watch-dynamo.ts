// `kvctl watch --dynamo ...`: Dynamo's KV-event plane into watch's index, through the Dynamo
// adapter (src/events/dynamo). Workers are named by their kvctl ids (--dynamo-worker pairs, else
// the Dynamo id itself); the adapter's problems go to stderr and count as "bad" on the worker's row.
import type { DynamoEventAdapter } from "../../events/dynamo/adapter.js";
import type { DynamoEventSubscriber } from "../../events/dynamo/subscriber.js";
import type { KvIndex } from "../../index/index.js";

export const DYNAMO_HELP = `  --dynamo ENDPOINT   Dynamo's KV-event plane (topic kv-events) of one worker (repeatable)
  --dynamo-discovery DIR  every kv-events publisher and block size in Dynamo's file discovery folder
  --dynamo-worker ID=NAME[:BLOCK]  Dynamo worker id -> kvctl worker id (and block size);
                   unlisted ids keep their Dynamo id
  --dynamo-nats URL  Dynamo's NATS event plane (--event-plane nats): every worker's kv-events
                   subject on that server
  --dynamo-namespace NS  only that Dynamo namespace on the NATS plane (default: every one)
  --block-size N   block size of Dynamo workers that no mapping or model card names`;

export const DYNAMO_OPTIONS = {
  dynamo: { type: "string", multiple: true },
  "dynamo-discovery": { type: "string" },
  "dynamo-worker": { type: "string", multiple: true },
  "dynamo-nats": { type: "string" },
  "dynamo-namespace": { type: "string" },
  "block-size": { type: "string" },
} as const;

export interface DynamoWatch {
  adapter: DynamoEventAdapter;
  /** Events applied per kvctl worker. */
  events: Map<string, number>;
  /** Problems per worker (kvctl id, or Dynamo id when unmapped). */
  bad: Map<string, number>;
  close(): Promise<void>;
}

type DynamoFlags = {
  dynamo?: string[];
  "dynamo-discovery"?: string;
  "dynamo-worker"?: string[];
  "dynamo-nats"?: string;
  "dynamo-namespace"?: string;
  "block-size"?: string;
};

export async function startDynamoWatch(
  v: DynamoFlags,
  index: KvIndex,
): Promise<DynamoWatch | null> {
  if (!v.dynamo?.length && !v["dynamo-discovery"] && !v["dynamo-nats"]) return null;
  const { DynamoEventSubscriber } = await import("../../events/dynamo/subscriber.js");
  const { readDynamoDiscovery } = await import("../../events/dynamo/discovery.js");
  const found = v["dynamo-discovery"]
    ? readDynamoDiscovery(v["dynamo-discovery"])
    : { channels: [], blockSizes: {}, maxBatchedTokens: {} };
  const adapter = await mappedAdapter(v, index, found.blockSizes);
  const events = new Map<string, number>();
  const bad = new Map<string, number>();
  adapter.on("record", (_r, worker: string) => events.set(worker, (events.get(worker) ?? 0) + 1));
  adapter.on(
    "problem",
    (p: { worker: string | null; dynamoWorker: string | null; kind: string; message: string }) => {
      const who = p.worker ?? p.dynamoWorker ?? "?";
      bad.set(who, (bad.get(who) ?? 0) + 1);
      console.error(`kvctl watch: Dynamo ${p.kind}: ${p.message}`);
    },
  );
  const endpoints = [...(v.dynamo ?? []), ...found.channels.map((c) => c.endpoint)];
  const sub: DynamoEventSubscriber | null = endpoints.length
    ? new DynamoEventSubscriber(adapter, endpoints).start()
    : null;
  sub?.on("error", (e: Error) => console.error(`kvctl watch: Dynamo event plane: ${e.message}`));
  const closeNats = v["dynamo-nats"]
    ? await watchNatsPlane(adapter, v["dynamo-nats"], v["dynamo-namespace"])
    : async () => undefined;
  return {
    adapter,
    events,
    bad,
    close: async () => {
      await sub?.close();
      await closeNats();
    },
  };
}

/** The adapter into the index, each Dynamo worker mapped to its kvctl id and block size. */
async function mappedAdapter(
  v: DynamoFlags,
  index: KvIndex,
  blockSizes: Record<string, number>,
): Promise<DynamoEventAdapter> {
  const { DynamoEventAdapter } = await import("../../events/dynamo/adapter.js");
  const { indexSink } = await import("../../index/index.js");
  const adapter = new DynamoEventAdapter({
    identity: true,
    blockSize: v["block-size"] ? Number(v["block-size"]) : undefined,
    sink: indexSink(index),
  });
  for (const [id, size] of Object.entries(blockSizes))
    adapter.map(id, { worker: id, blockSize: size });
  for (const spec of v["dynamo-worker"] ?? []) {
    const m = /^(\d+)=([^:]+)(?::(\d+))?$/.exec(spec);
    if (!m)
      throw new Error(`--dynamo-worker ${spec}: expected <dynamo id>=<kvctl id>[:<block size>]`);
    adapter.map(m[1], { worker: m[2], blockSize: m[3] ? Number(m[3]) : blockSizes[m[1]] });
  }
  return adapter;
}

/** Dynamo's NATS event plane into the adapter; returns what closes it. */
async function watchNatsPlane(
  adapter: DynamoEventAdapter,
  url: string,
  namespace: string | undefined,
): Promise<() => Promise<void>> {
  const { connect } = await import("@nats-io/transport-node");
  const { DynamoNatsSubscriber, dynamoNatsSubject } = await import("../../events/dynamo/nats.js");
  const nc = await connect({ servers: url, name: "kvctl-watch-dynamo" });
  const ns = new DynamoNatsSubscriber(adapter, nc, dynamoNatsSubject(namespace)).start();
  await ns.ready();
  console.error(`kvctl watch: Dynamo NATS event plane ${url}: subscribed to ${ns.subject}`);
  return async () => {
    await ns.close();
    await nc.close();
  };
}
