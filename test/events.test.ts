// KV events over real ZMQ sockets, against SGLang's own publisher. The python side
// (python/oracles/kv_events_publisher.py) instantiates the pinned release's ZmqEventPublisher
// class itself (module file loaded verbatim, without sglang/__init__.py) and its msgspec structs.
import { readdirSync, readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { XPublisher } from "zeromq";
import { decodeBatch, decodeSeq, encodeSeq } from "../src/events/decode.js";
import { encodeBatch } from "../src/events/encode.js";
import { KvEventConsumer } from "../src/events/consumer.js";
import { KvEventPublisher } from "../src/events/publisher.js";
import type { BlockStoredEvent, KvEventBatch } from "../src/events/types.js";
import { InMemoryKvIndex, indexSink, InstrumentedKvIndex } from "../src/index/index.js";
import { hasVenv, repoRoot, venvPython } from "./helpers/python.js";
import { freePort, range, SglangPublisher, waitFor } from "./events-helpers.js";
import { blockStored } from "./helpers/kv-events.js";

const fixtureDir = join(repoRoot, "test/fixtures/kv-events");
const A0 = 905019192701563378n; // tokens 1..64, page 64 (hashing.md vector)

type Fixture = { named_hashes: Record<string, string>; messages: string[][] };
const fixture = (name: string): Fixture =>
  JSON.parse(readFileSync(join(fixtureDir, `${name}.json`), "utf8"));
const frames = (m: string[]) => m.map((h) => Buffer.from(h, "hex"));

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanup.length) await (cleanup.pop() as () => Promise<void>)().catch(() => undefined);
});

function consumerWithIndex(endpoint: string, replayEndpoint?: string) {
  const index = new InstrumentedKvIndex(new InMemoryKvIndex());
  const logs: string[] = [];
  const c = new KvEventConsumer({
    endpoint,
    worker: "w0",
    replayEndpoint,
    sink: indexSink(index),
    log: (l) => logs.push(l),
  });
  cleanup.push(() => c.close());
  return { c, index, logs };
}

describe("captured fixtures (bytes from SGLang's ZmqEventPublisher)", () => {
  it("decodes SGLang 0.5.23's wire: array batch, tagged-map events, uint64/int64 hashes", () => {
    const f = fixture("sglang-basic");
    const [topic, seq, payload] = frames(f.messages[0]);
    expect(topic.toString()).toBe("kv-events");
    expect(decodeSeq(seq)).toBe(0n);
    expect(payload[0]).toBe(0x93); // fixarray(3): [ts, events, attn_dp_rank]
    const d = decodeBatch(payload);
    expect(d.form).toBe("array");
    expect(d.bad).toEqual([]);
    expect(d.batch.ts).toBe(1700000000.5);
    expect(d.batch.dpRank).toBe(0);
    const e = d.batch.events[0] as BlockStoredEvent;
    expect(e.type).toBe("BlockStored");
    // coalesced multi-page event: 2 hashes, 128 tokens
    expect(e.blockHashes).toEqual([A0, BigInt(f.named_hashes.a1)]);
    expect(e.blockHashes[1]).toBeLessThan(0n);
    expect(e.tokenIds).toEqual(range(1, 129));
    expect(e).toMatchObject({
      parentBlockHash: null,
      blockSize: 64,
      loraId: null,
      medium: "GPU",
      tier: "GPU",
      cacheSalt: null,
    });
    const child = decodeBatch(frames(f.messages[1])[2]).batch.events[0] as BlockStoredEvent;
    expect(child.parentBlockHash).toBe(BigInt(f.named_hashes.a1));
    expect(decodeBatch(frames(f.messages[3])[2]).batch.events).toEqual([
      { type: "AllBlocksCleared" },
    ]);
  });

  it("carries cache_salt and session_id in the map form", () => {
    const e = decodeBatch(frames(fixture("sglang-salted").messages[0])[2]).batch
      .events[0] as BlockStoredEvent;
    expect(e.cacheSalt).toBe("tenant-a");
    expect(e.sessionId).toBe("s1");
  });

  it("tracks medium transitions GPU -> CPU_PINNED -> removed in the index", () => {
    const f = fixture("sglang-tiers");
    const idx = new InMemoryKvIndex();
    const c = new KvEventConsumer({
      endpoint: "unused",
      worker: "w0",
      sink: indexSink(idx),
      log: () => {},
    });
    const a = [BigInt(f.named_hashes.a0), BigInt(f.named_hashes.a1)];
    c.onFrames(frames(f.messages[0]));
    expect(idx.stats().workers.w0).toEqual({ GPU: 2, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 });
    expect(idx.overlap(a).workers.get("w0")?.tiered).toEqual({
      GPU: 2,
      CPU_PINNED: 0,
      DISK: 0,
      EXTERNAL: 0,
    });
    c.onFrames(frames(f.messages[1]));
    expect(idx.stats().workers.w0).toEqual({ GPU: 0, CPU_PINNED: 2, DISK: 0, EXTERNAL: 0 });
    expect(idx.overlap(a).workers.get("w0")?.tiered).toEqual({
      GPU: 0,
      CPU_PINNED: 2,
      DISK: 0,
      EXTERNAL: 0,
    });
    c.onFrames(frames(f.messages[2]));
    expect(idx.stats()).toMatchObject({ blocks: 0, workers: { w0: { GPU: 0, CPU_PINNED: 0 } } });
    expect(c.metrics).toMatchObject({ batches: 3, gaps: 0, badEvents: 0 });
  });

  it("a batch listener gets the events from the index's one decode of the payload", () => {
    const f = fixture("sglang-tiers");
    const idx = new InMemoryKvIndex();
    const calls = { frame: 0, decoded: 0 };
    const applyFrame = idx.applyFrame.bind(idx);
    const applyFrameDecoded = idx.applyFrameDecoded.bind(idx);
    idx.applyFrame = (w, p) => (calls.frame++, applyFrame(w, p));
    idx.applyFrameDecoded = (w, p) => (calls.decoded++, applyFrameDecoded(w, p));
    const c = new KvEventConsumer({
      endpoint: "unused",
      worker: "w0",
      sink: indexSink(idx),
      log: () => {},
    });
    c.onFrames(frames(f.messages[0])); // nobody listens: the plain path
    const got: KvEventBatch[] = [];
    c.on("batch", ({ batch }) => got.push(batch));
    c.onFrames(frames(f.messages[1]));
    c.onFrames([Buffer.from("kv"), frames(f.messages[2])[1], Buffer.from([0x93, 0xc1])]); // refused whole
    expect(calls).toEqual({ frame: 1, decoded: 2 });
    expect(got).toEqual([decodeBatch(frames(f.messages[1])[2]).batch]);
    expect(idx.stats().workers.w0).toEqual({ GPU: 0, CPU_PINNED: 2, DISK: 0, EXTERNAL: 0 });
    expect(c.metrics).toMatchObject({ batches: 2, badBatches: 1 });
    expect(idx.counters("w0").badBatches.msgpack).toBe(1);
    // through the metrics decorator too
    const inst = new InstrumentedKvIndex(new InMemoryKvIndex());
    const c2 = new KvEventConsumer({
      endpoint: "unused",
      worker: "w0",
      sink: indexSink(inst),
      log: () => {},
    });
    const got2: KvEventBatch[] = [];
    c2.on("batch", ({ batch }) => got2.push(batch));
    c2.onFrames(frames(f.messages[0]));
    expect(got2).toEqual([decodeBatch(frames(f.messages[0])[2]).batch]);
    expect(inst.metrics.eventsApplied.BlockStored).toBe(
      got2[0].events.filter((e) => e.type === "BlockStored").length,
    );
  });

  it("every committed fixture decodes cleanly", () => {
    for (const name of readdirSync(fixtureDir).filter((n) => n.endsWith(".json"))) {
      for (const m of fixture(name.replace(/\.json$/, "")).messages)
        expect(decodeBatch(frames(m)[2]).bad).toEqual([]);
    }
  });
});

describe("other wire forms", () => {
  it("accepts SGLang's older positional form with a metadata map, and vLLM's positional and map forms", async () => {
    const { Packr } = await import("msgpackr");
    const p = new Packr({ useRecords: false });
    const u64 = 0xfea7b32778ecbdd7n; // as uint64 on the wire -> signed
    const old = p.pack([
      1.5,
      [
        ["BlockStored", [u64], null, [1, 2], 2, null, "GPU", { cache_salt: "s" }],
        ["BlockRemoved", [5], "CPU_PINNED"],
      ],
      0,
    ]);
    const d = decodeBatch(old);
    expect(d.bad).toEqual([]);
    expect(d.batch.events[0]).toMatchObject({
      blockHashes: [-96911884851298857n],
      cacheSalt: "s",
      loraName: null,
    });
    expect(d.batch.events[1]).toMatchObject({ type: "BlockRemoved", tier: "CPU_PINNED" });
    const vllmPos = p.pack([
      2.0,
      [
        [
          "BlockStored",
          [7],
          null,
          [1, 2, 3, 4],
          4,
          null,
          "GPU",
          "my-lora",
          null,
          0,
          "full_attention",
          null,
        ],
      ],
      null,
    ]);
    expect(decodeBatch(vllmPos).batch.events[0]).toMatchObject({
      loraName: "my-lora",
      blockHashes: [7n],
    });
    const vllmMap = p.pack({
      ts: 3.0,
      events: [
        {
          type: "BlockStored",
          block_hashes: [8],
          parent_block_hash: 7,
          token_ids: [1, 2],
          block_size: 2,
          group_idx: 0,
        },
      ],
      data_parallel_rank: 1,
    });
    const m = decodeBatch(vllmMap);
    expect(m.form).toBe("map");
    expect(m.batch.dpRank).toBe(1);
    expect(m.batch.events[0]).toMatchObject({ parentBlockHash: 7n, tier: "GPU", medium: null });
  });

  it("reports bad events and keeps the good ones of the batch", async () => {
    const { Packr } = await import("msgpackr");
    const p = new Packr({ useRecords: false });
    const d = decodeBatch(
      p.pack([
        1.0,
        [
          ["Bogus", 1],
          {
            type: "BlockStored",
            block_hashes: ["x"],
            parent_block_hash: null,
            token_ids: [1],
            block_size: 1,
            lora_id: null,
          },
          {
            type: "BlockStored",
            block_hashes: [1],
            parent_block_hash: null,
            token_ids: [1],
            block_size: -64,
            lora_id: null,
          },
          {
            type: "BlockStored",
            block_hashes: [1.5],
            parent_block_hash: null,
            token_ids: [1],
            block_size: 1,
            lora_id: null,
          },
          { type: "BlockRemoved", block_hashes: [3] },
        ],
        0,
      ]),
    );
    expect(d.bad.map((b) => b.index)).toEqual([0, 1, 2, 3]);
    expect(d.bad[0].reason).toMatch(/unknown event tag/);
    expect(d.bad[2].reason).toMatch(/block_size/);
    expect(d.batch.events).toHaveLength(1);
  });
});

describe.skipIf(!hasVenv)("live: SGLang's ZmqEventPublisher -> KvEventConsumer over tcp", () => {
  it("consumes stores/removes, detects a gap and replays it before applying later batches", async () => {
    const port = await freePort();
    const rport = await freePort();
    const py = await new SglangPublisher(
      `tcp://127.0.0.1:${port}`,
      `tcp://127.0.0.1:${rport}`,
    ).start();
    cleanup.push(() => py.stop());
    const { c, index, logs } = consumerWithIndex(
      `tcp://127.0.0.1:${port}`,
      `tcp://127.0.0.1:${rport}`,
    );
    const gaps: unknown[] = [];
    const replays: { received: number; ok: boolean; unrecovered: bigint }[] = [];
    c.on("gap", (g) => gaps.push(g));
    c.on("replay", (r) => replays.push(r));
    await c.start();
    await py.waitSubscribers(); // ZMQ drops what is sent before the subscription arrives

    expect(await py.publish([{ type: "BlockStored", tokens: range(1, 65), page: 64 }])).toBe(
      "SENT 0",
    );
    await waitFor(() => c.metrics.batches === 1, 5000, "first batch");
    expect(index.lookup(A0)?.residency.get("w0")).toEqual(["GPU"]);

    // seq 1 is lost on the wire (but buffered for replay): a store of a child page.
    await py.cmd({ op: "drop" });
    await py.publish([
      { type: "BlockStored", tokens: range(65, 129), page: 64, parent: A0.toString() },
    ]);
    await py.publish([{ type: "BlockStored", tokens: range(1000, 1064), page: 64 }]);
    await waitFor(() => c.metrics.batches === 3, 5000, "replayed + live batch");
    await c.settled();
    expect(gaps).toHaveLength(1);
    expect(replays).toEqual([expect.objectContaining({ received: 2, ok: true, unrecovered: 0n })]);
    // SGLang's buffer already held seq 2 when the replay request came: both 1 and 2 replayed.
    expect(c.metrics).toMatchObject({
      gaps: 1,
      missedBatches: 1,
      replays: 1,
      replayedBatches: 2,
      unrecoveredBatches: 0,
      duplicates: 0,
    });
    expect(c.seq.expected).toBe(3n);
    expect(index.stats().workers.w0.GPU).toBe(3);
    expect(logs.some((l) => /worker w0 seq 2: gap, 1 batch\(es\) missing from 1/.test(l))).toBe(
      true,
    );
  });

  it("a removal that follows a lost store is applied after the replayed store", async () => {
    const port = await freePort();
    const rport = await freePort();
    const py = await new SglangPublisher(
      `tcp://127.0.0.1:${port}`,
      `tcp://127.0.0.1:${rport}`,
    ).start();
    cleanup.push(() => py.stop());
    const { c, index } = consumerWithIndex(`tcp://127.0.0.1:${port}`, `tcp://127.0.0.1:${rport}`);
    await c.start();
    await py.waitSubscribers();
    await py.publish([{ type: "AllBlocksCleared" }]); // seq 0
    await waitFor(() => c.metrics.batches === 1);
    await py.cmd({ op: "drop" });
    await py.publish([{ type: "BlockStored", tokens: range(1, 65), page: 64 }]); // seq 1 lost
    await py.publish([{ type: "BlockRemoved", hashes: [A0.toString()], medium: "GPU" }]); // seq 2
    await waitFor(() => c.metrics.batches === 3);
    await c.settled();
    expect(index.metrics.unknownRemovals).toBe(0);
    expect(index.lookup(A0)).toBeUndefined();
    expect(index.metrics.eventsApplied).toMatchObject({ BlockStored: 1, BlockRemoved: 1 });
  });

  it("detects a publisher restart (seq back to 0) and clears the worker's blocks", async () => {
    const port = await freePort();
    const py = await new SglangPublisher(`tcp://127.0.0.1:${port}`).start();
    cleanup.push(() => py.stop());
    const { c, index } = consumerWithIndex(`tcp://127.0.0.1:${port}`);
    const restarts: unknown[] = [];
    c.on("restart", (r) => restarts.push(r));
    await c.start();
    await py.waitSubscribers();
    await py.publish([{ type: "BlockStored", tokens: range(1, 129), page: 64 }]);
    await py.publish([{ type: "BlockStored", tokens: range(500, 564), page: 64 }]);
    await waitFor(() => c.metrics.batches === 2);
    expect(index.stats().workers.w0.GPU).toBe(3);
    await py.cmd({ op: "restart" });
    await py.waitSubscribers(); // the consumer's SUB reconnects and subscribes to the new socket
    await py.publish([{ type: "BlockStored", tokens: range(900, 964), page: 64 }]);
    await waitFor(() => c.metrics.batches === 3, 8000, "post-restart batch");
    expect(c.metrics.restarts).toBe(1);
    expect(restarts).toEqual([{ worker: "w0", seq: 0n, expected: 2n }]);
    expect(index.stats().workers.w0.GPU).toBe(1);
    expect(index.lookup(A0)).toBeUndefined();
  });
});

describe.skipIf(!hasVenv)("KvEventPublisher is byte-compatible with SGLang's", () => {
  it("SGLang's msgspec decoder reads our batches and re-encodes them to the same bytes", () => {
    const batches: KvEventBatch[] = [
      {
        ts: 1700000000, // integral: msgspec still writes float64
        dpRank: 0,
        events: [
          blockStored({
            blockHashes: [A0, -96911884851298857n, 5n, 300n, 70000n, 2n ** 40n],
            tokenIds: range(0, 384),
            blockSize: 64,
          }),
          blockStored({
            blockHashes: [-5n, -200n, -40000n, -(2n ** 40n)],
            parentBlockHash: A0,
            tokenIds: [0, 127, 128, 255, 256, 65535, 65536, 4294967295],
            blockSize: 2,
            loraId: 3,
            medium: "CPU_PINNED",
            tier: "CPU_PINNED",
            cacheSalt: "tenant-a",
            sessionId: "s".repeat(40),
            loraName: "lora-x",
          }),
          { type: "BlockRemoved", blockHashes: [A0], medium: "DISK", tier: "DISK" },
          {
            type: "BlockRemoved",
            blockHashes: range(0, 20).map(BigInt),
            medium: null,
            tier: "GPU",
          },
          { type: "AllBlocksCleared" },
        ],
      },
      { ts: 1.25, dpRank: 3, events: [] },
    ];
    const payloads = batches.map((b) => encodeBatch(b).toString("hex"));
    const r = spawnSync(
      venvPython,
      [join(repoRoot, "python/oracles/kv_events_publisher.py"), "decode"],
      { input: JSON.stringify(payloads), encoding: "utf8" },
    );
    expect(r.stderr).toBe("");
    const out = JSON.parse(r.stdout) as { equal: boolean; batch: unknown[] }[];
    expect(out.map((o) => o.equal)).toEqual([true, true]);
    expect((out[0].batch[1] as { block_hashes: number[] }[])[0].block_hashes[0]).toBe(Number(A0)); // json loses precision; bytes equal is the proof
    // and our decoder reads them back
    expect(decodeBatch(Buffer.from(payloads[0], "hex")).batch.events).toEqual(batches[0].events);
  });

  it("matches the bytes SGLang's publisher sent for the same batch (captured fixture)", () => {
    const f = fixture("sglang-tiers");
    const payload = frames(f.messages[1])[2];
    const re = encodeBatch(decodeBatch(payload).batch);
    expect(re.equals(payload)).toBe(true);
  });
});

describe("KvEventPublisher -> KvEventConsumer with replay", () => {
  it("numbers batches 0.., replays from its bounded buffer and ends with END_SEQ", async () => {
    const pub = await new KvEventPublisher({
      endpoint: "tcp://127.0.0.1:0",
      replayEndpoint: "tcp://127.0.0.1:0",
      topic: "kv",
      bufferSteps: 4,
    }).bind();
    cleanup.push(() => pub.close());
    const index = new InstrumentedKvIndex(new InMemoryKvIndex());
    const c = new KvEventConsumer({
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint ?? undefined,
      topic: "kv",
      worker: "eng",
      sink: indexSink(index),
      log: () => {},
    });
    cleanup.push(() => c.close());
    await c.start();
    await pub.waitForSubscribers(1);
    expect(
      await pub.blockStored({ blockHashes: [1n, 2n], tokenIds: range(0, 8), blockSize: 4 }).flush(),
    ).toBe(0n);
    await waitFor(() => c.metrics.batches === 1);
    // Simulate loss: close the consumer's view by publishing while it ignores (pretend drop) —
    // instead, feed the consumer a later seq directly to open a gap it must replay.
    await pub
      .blockStored({
        blockHashes: [3n],
        parentBlockHash: 2n,
        tokenIds: range(8, 12),
        blockSize: 4,
        medium: "CPU_PINNED",
      })
      .flush();
    await waitFor(() => c.metrics.batches === 2);
    // The buffer holds 4 batches; publish 6 more with the consumer detached from the wire.
    await c.close();
    for (let i = 0; i < 6; i++)
      await pub
        .blockStored({ blockHashes: [BigInt(10 + i)], tokenIds: [1, 2, 3, 4], blockSize: 4 })
        .flush();
    const c2 = new KvEventConsumer({
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint ?? undefined,
      topic: "kv",
      worker: "eng",
      sink: indexSink(index),
      log: () => {},
    });
    cleanup.push(() => c2.close());
    c2.seq.accept(1n); // it had seen 0 and 1
    await c2.start();
    await pub.waitForSubscribers(2); // the first consumer's subscription counted too
    await pub.blockRemoved([1n]).flush(); // seq 8
    await waitFor(() => c2.metrics.batches >= 4, 5000, "replayed batches");
    await c2.settled();
    // The 4-batch buffer holds 5..8 when asked: 2,3,4 rolled out (unrecoverable), 5..8 replayed,
    // and the live copy of 8 is dropped as already delivered.
    expect(c2.metrics).toMatchObject({
      gaps: 1,
      missedBatches: 6,
      replays: 1,
      replayedBatches: 4,
      unrecoveredBatches: 3,
      duplicates: 0,
      batches: 4,
    });
    expect(index.lookup(1n)).toBeUndefined();
    expect(index.lookup(15n)).toBeDefined(); // seq 7, replayed
    expect(index.lookup(12n)).toBeUndefined(); // seq 4, lost
    expect(c2.seq.expected).toBe(9n);
  });
});

describe("bad input over a real socket", () => {
  it("counts and skips truncated frames, wrong frame counts and bad events, and keeps consuming", async () => {
    const pub = new XPublisher({ linger: 0 });
    await pub.bind("tcp://127.0.0.1:0");
    cleanup.push(async () => pub.close());
    const index = new InstrumentedKvIndex(new InMemoryKvIndex());
    const logs: string[] = [];
    const c = new KvEventConsumer({
      endpoint: pub.lastEndpoint as string,
      worker: "wX",
      sink: indexSink(index),
      log: (l) => logs.push(l),
    });
    cleanup.push(() => c.close());
    await c.start();
    // An XPUB sees the subscription arrive: from then on nothing sent is dropped.
    const [subscription] = await pub.receive();
    expect(subscription[0]).toBe(1);
    const good = (seq: bigint, h: bigint) =>
      pub.send([
        Buffer.alloc(0),
        encodeSeq(seq),
        encodeBatch({
          ts: 1,
          dpRank: 0,
          events: [blockStored({ blockHashes: [h], tokenIds: [1, 2], blockSize: 2 })],
        }),
      ]);
    await good(0n, 100n);
    const full = encodeBatch({
      ts: 1,
      dpRank: 0,
      events: [{ type: "BlockRemoved", blockHashes: [100n], medium: "GPU", tier: "GPU" }],
    });
    await pub.send([Buffer.alloc(0), encodeSeq(1n), full.subarray(0, full.length - 3)]); // truncated payload
    await pub.send([Buffer.alloc(0), encodeSeq(2n)]); // 2 frames
    await pub.send([Buffer.alloc(0), Buffer.from([0, 1, 2]), full]); // short seq frame
    const { Packr } = await import("msgpackr");
    const p = new Packr({ useRecords: false });
    await pub.send([
      Buffer.alloc(0),
      encodeSeq(2n),
      p.pack([
        1.0,
        [
          ["Mystery"],
          {
            type: "BlockStored",
            block_hashes: [101],
            parent_block_hash: null,
            token_ids: [1],
            block_size: -1,
            lora_id: null,
          },
          { type: "BlockRemoved", block_hashes: ["nope"] },
        ],
        0,
      ]),
    ]);
    await good(3n, 102n);
    await waitFor(() => c.metrics.batches === 3, 5000, "good batches after bad ones");
    expect(c.metrics).toMatchObject({ badBatches: 1, badFrames: 2, badEvents: 3, batches: 3 });
    expect(index.lookup(100n)).toBeDefined(); // the truncated removal was not applied
    expect(index.lookup(101n)).toBeUndefined(); // half an event is never applied
    expect(index.lookup(102n)).toBeDefined();
    expect(logs.some((l) => l.startsWith("kv-events: worker wX seq 1: msgpack"))).toBe(true);
    // Later problems within the log interval are folded into one summary line (written by close).
    const kinds = Object.entries(c.metrics.problems);
    expect(
      kinds.filter(([k]) => /^bad event: unknown event tag/.test(k)).map(([, n]) => n),
    ).toEqual([1]);
    expect(kinds.filter(([k]) => /^bad message: /.test(k)).reduce((a, [, n]) => a + n, 0)).toBe(2);
    await c.close();
    expect(
      logs.some((l) =>
        /worker wX: .*1 × bad event: unknown event tag.*\(last: seq 2: event 2:/.test(l),
      ),
    ).toBe(true);
  });
});
