// Dynamo's KV-event messages through kvctl's adapter, without a deployment: messages built in
// Dynamo's wire form (the real stream is covered by test/dynamo.test.ts). Bad input: an unmapped
// Dynamo worker, an unknown block size, a tokens_hash that is not the tokens' hash, an
// undecodable message; each is reported by name, counted, marks the worker stale, throws nothing,
// and the rest of the stream still applies.
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { DynamoEventAdapter, type DynamoProblem } from "../src/events/dynamo/adapter.js";
import { decodeDynamoMessage } from "../src/events/dynamo/decode.js";
import { dynamoBlockHashes } from "../src/hash/dynamo.js";
import { blockHashes } from "../src/hash/index.js";
import { indexSink, InMemoryKvIndex } from "../src/index/index.js";

const packr = new Packr({ useRecords: false, int64AsType: "bigint", mapsAsObjects: true });
const PAGE = 4;
const W = 3404231588825800073n;

type Data = Record<string, unknown> | string;

function message(worker: bigint, data: Data, tier = "device", seq = 0n): Uint8Array[] {
  const payload = packr.pack([
    {
      worker_id: worker,
      storage_tier: tier,
      residency_domain: "worker",
      event: { event_id: 1, data },
      dp_rank: 0,
    },
  ]);
  const env = packr.pack({
    publisher_id: 7n,
    sequence: seq,
    published_at: 1,
    topic: "kv-events",
    payload,
  });
  const head = Buffer.alloc(5);
  head[0] = 1;
  head.writeUInt32BE(env.length, 1);
  const u64 = (v: bigint) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(v);
    return b;
  };
  return [Buffer.from("kv-events"), u64(7n), u64(seq), Buffer.concat([head, env])];
}

const toks = Array.from({ length: 12 }, (_, i) => 100 + i);
const engine = Array.from(blockHashes(toks, { pageSize: PAGE }));
const local = Array.from(dynamoBlockHashes(toks, { blockSize: PAGE }));
// on the wire as Dynamo sends them: u64
const stored = (tokensHash = local) => ({
  stored: {
    parent_hash: null,
    start_position: null,
    blocks: engine.map((h, i) => ({
      block_hash: BigInt.asUintN(64, h),
      tokens_hash: tokensHash[i],
      mm_extra_info: null,
    })),
  },
});

function setup(o: ConstructorParameters<typeof DynamoEventAdapter>[0] = {}) {
  const index = new InMemoryKvIndex();
  const book = new Map(engine.map((h, i) => [h, toks.slice(i * PAGE, (i + 1) * PAGE)]));
  const a = new DynamoEventAdapter({
    tokensOf: (_w, h) => book.get(h),
    sink: indexSink(index),
    ...o,
  });
  const problems: DynamoProblem[] = [];
  const stale: { worker: string; reason: string }[] = [];
  a.on("problem", (p) => problems.push(p));
  a.on("stale", (s) => stale.push(s));
  return { a, index, problems, stale };
}

describe("Dynamo KV-event adapter", () => {
  it("decodes Dynamo's envelope: u64 engine hashes become kvctl's signed keys, tiers map, removals and clears too", () => {
    const f = decodeDynamoMessage(message(W, stored(), "host_pinned", 5n));
    expect(f.sequence).toBe(5n);
    expect(f.records[0]).toMatchObject({
      dynamoWorker: W.toString(),
      tier: "CPU_PINNED",
      storageTier: "host_pinned",
    });
    expect(f.records[0].data).toEqual({
      kind: "stored",
      parentHash: null,
      blocks: engine.map((h, i) => ({ blockHash: h, tokensHash: local[i] })),
    });
    expect(
      decodeDynamoMessage(
        message(W, { removed: { block_hashes: [BigInt.asUintN(64, engine[0])] } }),
      ).records[0].data,
    ).toEqual({ kind: "removed", blockHashes: [engine[0]] });
    expect(decodeDynamoMessage(message(W, "cleared")).records[0].data).toEqual({ kind: "cleared" });
  });

  it("a mapped worker's events reach the index under its kvctl id, tokens_hash checked", () => {
    const { a, index, problems } = setup({
      workers: { [W.toString()]: { worker: "w0", blockSize: PAGE } },
    });
    a.applyMessage(message(W, stored()));
    a.applyMessage(message(W, stored(), "host_pinned"));
    expect(problems).toEqual([]);
    expect(a.metrics.tokensMatched).toBe(6);
    expect(index.lookup(engine[2])?.residency.get("w0")).toEqual(["GPU", "CPU_PINNED"]);
    a.applyMessage(
      message(W, { removed: { block_hashes: engine.map((h) => BigInt.asUintN(64, h)) } }),
    );
    expect(index.lookup(engine[2])?.residency.get("w0")).toEqual(["CPU_PINNED"]);
    a.applyMessage(message(W, "cleared"));
    expect(index.lookup(engine[2])).toBeUndefined();
  });

  it("bad input: unmapped worker, unknown block size, wrong tokens_hash, undecodable: named, counted, stale, nothing applied, no throw", () => {
    const { a, index, problems, stale } = setup({
      workers: { "42": { worker: "w-nosize" }, [W.toString()]: { worker: "w0", blockSize: PAGE } },
    });
    a.applyMessage(message(99n, stored()));
    a.applyMessage(message(42n, stored()));
    const wrong = [...local];
    wrong[1] ^= 1n;
    a.applyMessage(message(W, stored(wrong)));
    const broken = message(W, stored());
    broken[3] = broken[3].subarray(0, 20);
    a.applyMessage(broken);
    expect(problems.map((p) => p.kind)).toEqual([
      "unmapped_worker",
      "unknown_block_size",
      "tokens_hash",
      "decode",
    ]);
    expect(problems[0].message).toMatch(/Dynamo worker 99 has no kvctl worker mapping/);
    expect(problems[1].message).toMatch(/w-nosize.*block size unknown/);
    expect(problems[2].message).toMatch(/tokens_hash/);
    expect(problems[3].message).toMatch(/^undecodable Dynamo KV-event message: frame/);
    expect(a.metrics.problems).toEqual({
      unmapped_worker: 1,
      unknown_block_size: 1,
      tokens_hash: 1,
      decode: 1,
    });
    expect(stale).toEqual([
      { worker: "99", reason: "unmapped_worker" },
      { worker: "w-nosize", reason: "unknown_block_size" },
      { worker: "w0", reason: "tokens_hash" },
    ]);
    expect(index.workers()).toEqual([]); // nothing half-applied
    a.applyMessage(message(W, stored())); // the stream goes on
    expect(index.lookup(engine[0])?.residency.get("w0")).toEqual(["GPU"]);
  });

  it("a field of the wrong kind is named", () => {
    expect(() =>
      decodeDynamoMessage(
        message(W, {
          stored: { parent_hash: null, blocks: [{ block_hash: "x", tokens_hash: 1 }] },
        }),
      ),
    ).toThrow(/payload\[0\]\.event\.data\.stored\.blocks\[0\]\.block_hash: expected an integer/);
  });
});
