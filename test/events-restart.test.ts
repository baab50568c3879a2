// A worker's new process seen from its KV-event stream alone: SGLang numbers batches from 0 again
// and stamps each with the time it was built. A restart whose first batches were missed (the
// subscriber reconnecting late) shows as a seq below the expected one that is stamped later than
// anything seen, and is not dropped as a duplicate; a real duplicate (stamped earlier) still is.
import { afterEach, describe, expect, it } from "vitest";
import { KvEventConsumer } from "../src/events/consumer.js";
import { batchTs, encodeSeq } from "../src/events/decode.js";
import { encodeBatch } from "../src/events/encode.js";
import { InMemoryKvIndex, indexSink, InstrumentedKvIndex } from "../src/index/index.js";
import { freePort, range, SglangPublisher, waitFor } from "./events-helpers.js";
import { hasVenv } from "./helpers/python.js";

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanup.length) await (cleanup.pop() as () => Promise<void>)().catch(() => undefined);
});

/** `decodedOnly`: the sink takes decoded batches (no applyFrame), so the ts comes from the consumer's own decode. */
function consumer(endpoint = "tcp://127.0.0.1:1", decodedOnly = false) {
  const index = new InstrumentedKvIndex(new InMemoryKvIndex());
  const resets: string[] = [];
  const sink = indexSink(index);
  const applyFrame = decodedOnly ? undefined : sink.applyFrame;
  const c = new KvEventConsumer({
    endpoint,
    worker: "w0",
    sink: { ...sink, applyFrame, resetWorker: (w) => (resets.push(w), sink.resetWorker(w)) },
    log: () => undefined,
  });
  cleanup.push(() => c.close());
  return { c, index, resets };
}

const frame = (seq: bigint, ts: number) => [
  Buffer.from("kv-events"),
  encodeSeq(seq),
  encodeBatch({ ts, events: [{ type: "AllBlocksCleared" }], dpRank: null } as never),
];

describe("batch publish times", () => {
  it("reads ts from the array and the map forms, and nothing from anything else", () => {
    expect(batchTs(encodeBatch({ ts: 1764236000.25, events: [], dpRank: null }))).toBe(
      1764236000.25,
    );
    // {"ts": 7, "events": []} as a map (the form some engines send)
    expect(
      batchTs(Buffer.from([0x82, 0xa2, 0x74, 0x73, 0x07, 0xa6, ...Buffer.from("events"), 0x90])),
    ).toBe(7);
    // the map's keys in any order: the decoder reads the whole batch
    expect(
      batchTs(Buffer.from([0x82, 0xa6, ...Buffer.from("events"), 0x90, 0xa2, 0x74, 0x73, 0x07])),
    ).toBe(7);
    expect(batchTs(Buffer.from([0x82, 0xa6, ...Buffer.from("events"), 0x90]))).toBeNull();
    expect(batchTs(Buffer.from([0xc0]))).toBeNull();
    expect(batchTs(Buffer.from([0x93, 0xcb, 0x00]))).toBeNull();
    expect(batchTs(Buffer.alloc(0))).toBeNull();
  });

  it.each([
    ["a frame-applying sink (the index)", false],
    ["a sink given decoded batches", true],
  ])(
    "a seq below the expected one stamped later than every batch seen is a restart; stamped earlier, a duplicate: %s",
    (_name, decodedOnly) => {
      const { c, resets } = consumer(undefined, decodedOnly);
      for (const [seq, ts] of [
        [0n, 100],
        [1n, 101],
        [2n, 102],
      ] as const)
        c.onFrames(frame(seq, ts));
      c.onFrames(frame(1n, 101));
      expect([c.metrics.duplicates, c.metrics.restarts, resets]).toEqual([1, 0, []]);
      // The new process's seq 0 never arrived; its seq 1 does.
      c.onFrames(frame(1n, 250));
      expect([c.metrics.duplicates, c.metrics.restarts, resets]).toEqual([1, 1, ["w0"]]);
      expect(c.seq.expected).toBe(2n);
      c.onFrames(frame(2n, 251));
      expect([c.metrics.duplicates, c.metrics.restarts, c.metrics.batches]).toEqual([1, 1, 5]);
    },
  );
});

describe.skipIf(!hasVenv)("SGLang's own publisher restarted, its first batch missed", () => {
  it("is seen as a restart and the worker's blocks are cleared", async () => {
    const port = await freePort();
    const py = await new SglangPublisher(`tcp://127.0.0.1:${port}`).start();
    cleanup.push(() => py.stop());
    const { c, index } = consumer(`tcp://127.0.0.1:${port}`);
    await c.start();
    await py.waitSubscribers();
    for (const start of [1, 200, 400])
      await py.publish([{ type: "BlockStored", tokens: range(start, start + 64), page: 64 }]);
    await waitFor(() => c.metrics.batches === 3);
    expect(index.stats().workers.w0.GPU).toBe(3);
    await py.cmd({ op: "restart" });
    await py.waitSubscribers();
    // The new process's seq 0 is lost on the wire; seq 1 arrives, below the expected 3.
    await py.cmd({ op: "drop" });
    await py.publish([{ type: "BlockStored", tokens: range(900, 964), page: 64 }]);
    await py.publish([{ type: "BlockStored", tokens: range(1000, 1064), page: 64 }]);
    await waitFor(() => c.metrics.batches === 4, 8000, "the new process's batch");
    expect([c.metrics.restarts, c.metrics.duplicates]).toEqual([1, 0]);
    expect(index.stats().workers.w0.GPU).toBe(1);
  });
});
