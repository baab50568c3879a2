// The one KV-event decoder (native/events: bounded msgpack reader + engine adapters): SGLang's
// captured bytes read as SGLang's own msgspec reads them, the other engine forms, and input built
// to make a decoder allocate or log without bound.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { BatchDecodeError, decodeBatch } from "../src/events/decode.js";
import { encodeSeq } from "../src/events/decode.js";
import { KvEventConsumer } from "../src/events/consumer.js";
import { InMemoryKvIndex, indexSink } from "../src/index/index.js";
import { hasVenv, repoRoot, venvPython } from "./helpers/python.js";

const dir = join(repoRoot, "test/fixtures/kv-events");
const p = new Packr({ useRecords: false });
const fixturePayloads = readdirSync(dir)
  .filter((n) => n.endsWith(".json"))
  .flatMap((f) =>
    (JSON.parse(readFileSync(join(dir, f), "utf8")).messages as string[][]).map((m) => m[2]),
  );

describe.skipIf(!hasVenv)("decoder vs SGLang's msgspec", () => {
  it("every captured payload decodes to the events SGLang's own decoder reads from it", () => {
    // SGLang's KVEventBatch decoder (msgspec, tagged structs), run on the same bytes.
    const py = `
import json, sys, msgspec
from sglang.srt.disaggregation.kv_events import KVEventBatch
dec = msgspec.msgpack.Decoder(type=KVEventBatch)
out = []
for h in json.load(sys.stdin):
    b = dec.decode(bytes.fromhex(h))
    evs = []
    for e in b.events:
        d = {f: getattr(e, f) for f in e.__struct_fields__}
        d["type"] = type(e).__name__
        # 64-bit hashes as decimal strings (JSON numbers would lose bits)
        d["block_hashes"] = [str(h) for h in d.get("block_hashes") or []]
        if d.get("parent_block_hash") is not None: d["parent_block_hash"] = str(d["parent_block_hash"])
        evs.append(d)
    out.append({"ts": b.ts, "events": evs})
print(json.dumps(out, default=str))
`;
    const r = spawnSync(venvPython, ["-c", py], {
      input: JSON.stringify(fixturePayloads),
      encoding: "utf8",
    });
    expect(r.status, r.stderr).toBe(0);
    const want = JSON.parse(r.stdout) as { ts: number; events: Record<string, unknown>[] }[];
    expect(want.length).toBe(fixturePayloads.length);
    fixturePayloads.forEach((hex, i) => {
      const got = decodeBatch(Buffer.from(hex, "hex"));
      expect(got.bad).toEqual([]);
      expect(got.batch.ts).toBe(want[i].ts);
      expect(got.batch.events.length).toBe(want[i].events.length);
      got.batch.events.forEach((e, k) => {
        const w = want[i].events[k];
        expect(e.type).toBe(w.type);
        if (e.type === "AllBlocksCleared") return;
        expect(e.blockHashes.map(String)).toEqual(w.block_hashes);
        expect(e.medium).toBe(w.medium ?? null);
        if (e.type === "BlockStored") {
          expect(e.parentBlockHash === null ? null : String(e.parentBlockHash)).toBe(
            w.parent_block_hash ?? null,
          );
          expect(e.tokenIds).toEqual(w.token_ids);
          expect(e.blockSize).toBe(w.block_size);
          expect(e.cacheSalt).toBe(w.cache_salt ?? null);
          expect(e.sessionId).toBe(w.session_id ?? null);
        }
      });
    });
  });
});

describe("engine forms and bad events", () => {
  it("reads SGLang's positional form, vLLM's positional and map forms", () => {
    const old = decodeBatch(
      p.pack([
        1.5,
        [["BlockStored", [0xfea7b32778ecbdd7n], null, [1, 2], 2, null, "GPU", { cache_salt: "s" }]],
        0,
      ]),
    );
    expect(old.batch.events[0]).toMatchObject({
      blockHashes: [-96911884851298857n],
      cacheSalt: "s",
      loraName: null,
    });
    const vllm = decodeBatch(
      p.pack([
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
      ]),
    );
    expect(vllm.batch.events[0]).toMatchObject({
      loraName: "my-lora",
      blockHashes: [7n],
      tier: "GPU",
    });
    const bigram = decodeBatch(
      p.pack({
        ts: 3.0,
        events: [
          {
            type: "BlockStored",
            block_hashes: [8],
            parent_block_hash: 7,
            token_ids: [
              [1, 2],
              [2, 3],
            ],
            block_size: 2,
          },
        ],
        data_parallel_rank: 1,
      }),
    );
    expect(bigram).toMatchObject({
      form: "map",
      batch: { dpRank: 1, events: [{ bigram: true, tokenIds: [1, 2, 2, 3], parentBlockHash: 7n }] },
    });
  });

  it("names each refused event's kind and keeps the rest", () => {
    const d = decodeBatch(
      p.pack([
        1.0,
        [
          ["Bogus"],
          {
            type: "BlockStored",
            block_hashes: ["x"],
            parent_block_hash: null,
            token_ids: [1],
            block_size: 1,
          },
          {
            type: "BlockStored",
            block_hashes: [1],
            parent_block_hash: null,
            token_ids: [1],
            block_size: -64,
          },
          {
            type: "BlockStored",
            block_hashes: [1.5],
            parent_block_hash: null,
            token_ids: [1],
            block_size: 1,
          },
          {
            type: "BlockStored",
            block_hashes: [1],
            parent_block_hash: null,
            token_ids: [-1],
            block_size: 1,
          },
          {
            type: "BlockStored",
            block_hashes: [1],
            parent_block_hash: "p",
            token_ids: [1],
            block_size: 1,
          },
          { type: "BlockRemoved", block_hashes: [3], medium: "MARS" },
          null,
          { type: "BlockRemoved", block_hashes: [3] },
        ],
        0,
      ]),
    );
    expect(d.bad.map((b) => [b.index, b.kind])).toEqual([
      [0, "unknown_tag"],
      [1, "hash"],
      [2, "block_size"],
      [3, "hash"],
      [4, "tokens"],
      [5, "hash"],
      [6, "medium"],
      [7, "not_an_event"],
    ]);
    expect(d.bad[5].reason).toMatch(/parent_block_hash/);
    expect(d.batch.events).toEqual([
      { type: "BlockRemoved", blockHashes: [3n], medium: null, tier: "GPU" },
    ]);
  });
});

describe("bounded before allocating", () => {
  it("refuses an array header claiming more elements than bytes remain, at the header", () => {
    for (const bytes of [
      [0xdd, 0xff, 0xff, 0xff, 0xff],
      [0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff],
      [0xdf, 0xff, 0xff, 0xff, 0xff],
      [0xdb, 0xff, 0xff, 0xff, 0xff],
    ]) {
      expect(() => decodeBatch(Buffer.from(bytes))).toThrow(BatchDecodeError);
    }
    expect(() => decodeBatch(Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff]))).toThrow(
      /length exceeds the bytes that remain/,
    );
  });

  it("refuses truncated, trailing, too-deep and malformed payloads as a whole", () => {
    const full = p.pack([1.0, [{ type: "AllBlocksCleared" }], 0]);
    const deep = Buffer.concat([
      Buffer.from([0x93, 0x01, 0x91]),
      Buffer.alloc(100, 0x91),
      Buffer.from([0xc0, 0x00]),
    ]);
    for (const bad of [
      full.subarray(0, full.length - 2),
      Buffer.concat([full, Buffer.from([0])]),
      Buffer.from([0xc1]),
      Buffer.alloc(0),
      deep,
      p.pack([1.0]),
      p.pack(["x", [], 0]),
      p.pack(5),
    ]) {
      expect(() => decodeBatch(bad)).toThrow(/msgpack|batch/);
    }
  });

  it("a 1 MiB batch of 1 048 576 nil events is refused whole, counted once and logged once", () => {
    const payload = Buffer.concat([
      Buffer.from([0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xdd, 0x00, 0x10, 0x00, 0x00]),
      Buffer.alloc(1 << 20, 0xc0),
      Buffer.from([0x00]),
    ]);
    const idx = new InMemoryKvIndex();
    const logs: string[] = [];
    const c = new KvEventConsumer({
      endpoint: "unused",
      worker: "w",
      sink: indexSink(idx),
      log: (l) => logs.push(l),
    });
    c.onFrames([Buffer.alloc(0), encodeSeq(0n), payload]);
    expect(c.metrics).toMatchObject({ badBatches: 1, badEvents: 0, events: 0 });
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/1048576 events, over the maximum 65536/);
    expect(idx.counters("w").badBatches.too_many_events).toBe(1);
    // Under the limit, nil events are counted per kind with one log line per frame.
    const small = new InMemoryKvIndex({ maxEvents: 1 << 21 });
    const logs2: string[] = [];
    const c2 = new KvEventConsumer({
      endpoint: "unused",
      worker: "w",
      sink: indexSink(small),
      log: (l) => logs2.push(l),
    });
    c2.onFrames([Buffer.alloc(0), encodeSeq(0n), payload]);
    expect(c2.metrics).toMatchObject({ badEvents: 1 << 20, batches: 1 });
    expect(logs2).toHaveLength(1);
    expect(small.counters("w").badEvents.not_an_event).toBe(1 << 20);
  });

  it("a frame over the byte limit is refused whole", () => {
    const idx = new InMemoryKvIndex({ maxBytes: 64 });
    const r = idx.applyFrame(
      "w",
      p.pack([
        1.0,
        [
          {
            type: "BlockStored",
            block_hashes: [1, 2, 3],
            parent_block_hash: null,
            token_ids: Array(40).fill(1),
            block_size: 1,
          },
        ],
        0,
      ]),
    );
    expect(r).toMatchObject({ ok: false, errorKind: "too_large", added: 0 });
    expect(idx.lookup(1n)).toBeUndefined();
  });
});
