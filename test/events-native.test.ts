// The native batch decoder (native/events/kv_events.cpp, msgpack-c) against the JS decoder:
// same events, same bad-event verdicts, on SGLang's captured bytes and on hand-made bad input.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { decodeBatch } from "../src/events/decode.js";
import { decodeBatchColumns, decodeBatchNative, nativeDecoderAvailable } from "../src/events/native.js";
import { InMemoryKvIndex } from "../src/index/index.js";
import { repoRoot } from "./helpers/python.js";

const dir = join(repoRoot, "test/fixtures/kv-events");
const p = new Packr({ useRecords: false });
const strip = (x: unknown) => JSON.parse(JSON.stringify(x, (_k, v) => (typeof v === "bigint" ? `${v}n` : v)));

describe.skipIf(!nativeDecoderAvailable())("native KV-event decoder (addon)", () => {
  it("decodes SGLang's captured payloads exactly as the JS decoder does", () => {
    for (const f of readdirSync(dir).filter((n) => n.endsWith(".json"))) {
      for (const m of JSON.parse(readFileSync(join(dir, f), "utf8")).messages as string[][]) {
        const payload = Buffer.from(m[2], "hex");
        expect(strip(decodeBatchNative(payload))).toEqual(strip(decodeBatch(payload)));
      }
    }
  });

  it("other forms and bad events: same events kept, same indices rejected", () => {
    const cases = [
      [1.5, [["BlockStored", [0xfea7b32778ecbdd7n], null, [1, 2], 2, null, "GPU", { cache_salt: "s" }], ["BlockRemoved", [5], "CPU_PINNED"]], 0],
      [2.0, [["BlockStored", [7], null, [1, 2, 3, 4], 4, null, "GPU", "my-lora", null, 0, "full_attention", null]], null],
      { ts: 3.0, events: [{ type: "BlockStored", block_hashes: [8], parent_block_hash: 7, token_ids: [[1, 2], [2, 3]], block_size: 2 }], data_parallel_rank: 1 },
      [1.0, [["Bogus"], { type: "BlockStored", block_hashes: ["x"], parent_block_hash: null, token_ids: [1], block_size: 1, lora_id: null },
        { type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [1], block_size: -64, lora_id: null },
        { type: "BlockStored", block_hashes: [1.5], parent_block_hash: null, token_ids: [1], block_size: 1, lora_id: null },
        { type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [-1], block_size: 1, lora_id: null },
        { type: "BlockRemoved", block_hashes: [3], medium: "MARS" }, { type: "BlockRemoved", block_hashes: [3] }, { type: "AllBlocksCleared" }], 0],
    ];
    for (const c of cases) {
      const payload = p.pack(c);
      const js = decodeBatch(payload);
      const nat = decodeBatchNative(payload);
      expect(strip(nat.batch)).toEqual(strip(js.batch));
      expect(nat.bad.map((b) => b.index)).toEqual(js.bad.map((b) => b.index));
    }
  });

  it("rejects truncated and malformed batches as a whole", () => {
    const full = p.pack([1.0, [{ type: "AllBlocksCleared" }], 0]);
    for (const bad of [full.subarray(0, full.length - 2), Buffer.from([0xc1]), p.pack([1.0]), p.pack(["x", [], 0]), p.pack(5)]) {
      expect(() => decodeBatchColumns(bad)).toThrow(/msgpack|batch/);
      expect(() => decodeBatch(bad)).toThrow();
    }
  });

  it("columns feed the index without event objects", () => {
    const idx = new InMemoryKvIndex();
    const payload = p.pack([1.0, [
      { type: "BlockStored", block_hashes: [1, 2, 3], parent_block_hash: null, token_ids: [1, 2, 3, 4, 5, 6], block_size: 2, lora_id: null, medium: "GPU" },
      { type: "BlockStored", block_hashes: [1, 2], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 2, lora_id: null, medium: "CPU_PINNED" },
      { type: "BlockRemoved", block_hashes: [3, 9], medium: "GPU" },
    ], 0]);
    expect(idx.applyColumns("w", decodeBatchColumns(payload))).toMatchObject({ added: 5, removed: 1, unknownRemovals: 1 });
    expect(idx.stats().workers.w).toEqual({ GPU: 2, CPU_PINNED: 2, DISK: 0, EXTERNAL: 0 });
  });
});

describe.skipIf(!nativeDecoderAvailable())("native decoder keeps the dual key", () => {
  it("a consumer with the native decoder feeds token ids to an index with a token hasher", async () => {
    const { KvEventConsumer } = await import("../src/events/consumer.js");
    const { indexSink, InstrumentedKvIndex, sglangTokenHasher } = await import("../src/index/index.js");
    const idx = new InstrumentedKvIndex(new InMemoryKvIndex({ tokenHasher: sglangTokenHasher() }));
    const c = new KvEventConsumer({ endpoint: "unused", worker: "w", decoder: "native", sink: indexSink(idx), log: () => {} });
    const f = JSON.parse(readFileSync(join(dir, "sglang-basic.json"), "utf8"));
    c.onFrames((f.messages[0] as string[]).map((h) => Buffer.from(h, "hex")));
    expect(idx.lookup(905019192701563378n)?.tokenHash).toBe(905019192701563378n);
    expect(idx.metrics.hashMismatches).toBe(0);
  });
});
