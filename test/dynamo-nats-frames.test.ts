// Dynamo's NATS event plane carries the ZMQ plane's MessagePack envelope without its version byte
// and length: natsEnvelopeFrames puts a NATS message in the ZMQ frame form, so the one adapter
// decodes both (the real plane is covered by test/dynamo-nats.test.ts). Bad data is a decode
// problem, counted, with nothing applied.
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { DynamoEventAdapter, type DynamoProblem } from "../src/events/dynamo/adapter.js";
import { dynamoNatsSubject, natsEnvelopeFrames } from "../src/events/dynamo/nats.js";
import { blockHashes } from "../src/hash/index.js";
import { dynamoBlockHashes } from "../src/hash/dynamo.js";
import { indexSink, InMemoryKvIndex } from "../src/index/index.js";

const packr = new Packr({ useRecords: false, int64AsType: "bigint", mapsAsObjects: true });
const W = 3404231588825800073n;
const toks = Array.from({ length: 8 }, (_, i) => 100 + i);
const engine = Array.from(blockHashes(toks, { pageSize: 4 }));
const local = Array.from(dynamoBlockHashes(toks, { blockSize: 4 }));

describe("Dynamo NATS event plane framing", () => {
  it("a NATS message's envelope decodes through the adapter into the index; garbage is a counted decode problem", () => {
    const payload = packr.pack([
      {
        worker_id: W,
        storage_tier: "device",
        residency_domain: "worker",
        dp_rank: 0,
        event: {
          event_id: 1,
          data: {
            stored: {
              parent_hash: null,
              blocks: engine.map((h, i) => ({
                block_hash: BigInt.asUintN(64, h),
                tokens_hash: local[i],
              })),
            },
          },
        },
      },
    ]);
    const envelope = packr.pack({
      publisher_id: 7n,
      sequence: 3n,
      published_at: 1,
      topic: "kv-events",
      payload,
    });
    const index = new InMemoryKvIndex();
    const problems: DynamoProblem[] = [];
    const a = new DynamoEventAdapter({
      workers: { [W.toString()]: { worker: "w0", blockSize: 4 } },
      sink: indexSink(index),
    });
    a.on("problem", (p) => problems.push(p));
    const f = a.applyMessage(natsEnvelopeFrames(envelope));
    expect(f?.sequence).toBe(3n);
    expect(index.lookup(engine[1])?.residency.get("w0")).toEqual(["GPU"]);
    expect(a.applyMessage(natsEnvelopeFrames(new Uint8Array([1, 2, 3])))).toBeNull();
    expect(problems.map((p) => p.kind)).toEqual(["decode"]);
    expect(a.metrics.problems.decode).toBe(1);
  });

  it("subscribes to every namespace's kv-events subject, or one namespace's", () => {
    expect(dynamoNatsSubject()).toBe("namespace.*.component.*.endpoint.*.kv-events");
    expect(dynamoNatsSubject("dynamo")).toBe("namespace.dynamo.component.*.endpoint.*.kv-events");
  });
});
