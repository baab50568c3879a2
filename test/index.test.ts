import { describe, expect, it } from "vitest";
import type { BlockStoredEvent, Tier } from "../src/events/types.js";
import {
  applyEvent,
  hitsBeyond,
  InMemoryKvIndex,
  InstrumentedKvIndex,
  scoreWorkers,
  selectWorker,
} from "../src/index/index.js";

function stored(
  hashes: bigint[],
  parent: bigint | null,
  tier: Tier = "GPU",
  tokens?: number[],
): BlockStoredEvent {
  return {
    type: "BlockStored",
    blockHashes: hashes,
    parentBlockHash: parent,
    tokenIds: tokens ?? hashes.flatMap(() => [1, 2]),
    blockSize: 2,
    loraId: null,
    medium: tier,
    tier,
    cacheSalt: null,
    sessionId: null,
    loraName: null,
    bigram: false,
  };
}
const H = (n: number) => Array.from({ length: n }, (_, i) => BigInt(1000 + i));

describe("InMemoryKvIndex", () => {
  it("overlap per worker per tier, consecutive from the start, and Dynamo's tier-exclusive continuation", () => {
    const idx = new InMemoryKvIndex();
    const h = H(8);
    applyEvent(idx, "a", stored(h.slice(0, 3), null, "GPU"));
    applyEvent(idx, "a", stored(h.slice(0, 6), null, "CPU_PINNED"));
    applyEvent(idx, "a", stored(h.slice(6, 7), h[5], "DISK"));
    applyEvent(idx, "b", stored(h.slice(0, 1), null, "GPU"));
    applyEvent(idx, "b", stored(h.slice(1, 2), h[0], "DISK"));
    const o = idx.overlap(h);
    expect(o.workers.get("a")).toEqual({
      perTier: { GPU: 3, CPU_PINNED: 6, DISK: 0, EXTERNAL: 0 },
      tiered: { GPU: 3, CPU_PINNED: 3, DISK: 1, EXTERNAL: 0 },
    });
    expect(o.workers.get("b")?.tiered).toEqual({ GPU: 1, CPU_PINNED: 0, DISK: 1, EXTERNAL: 0 });
    expect(idx.stats().workers.a).toEqual({ GPU: 3, CPU_PINNED: 6, DISK: 1, EXTERNAL: 0 });
    // a missing block ends every prefix
    expect(idx.overlap([h[0], 5n, h[2]]).workers.get("a")?.perTier.GPU).toBe(1);
  });

  it("removes per tier, drops empty nodes, clears a worker on AllBlocksCleared", () => {
    const idx = new InstrumentedKvIndex(new InMemoryKvIndex());
    const h = H(4);
    applyEvent(idx, "a", stored(h, null));
    applyEvent(idx, "b", stored(h.slice(0, 2), null));
    expect(
      applyEvent(idx, "a", {
        type: "BlockRemoved",
        blockHashes: [h[3], 99n],
        medium: "GPU",
        tier: "GPU",
      }),
    ).toMatchObject({ removed: 1, unknownRemovals: 1 });
    expect(idx.lookup(h[3])).toBeUndefined();
    applyEvent(idx, "a", { type: "AllBlocksCleared" });
    expect(idx.stats()).toMatchObject({ blocks: 2, workers: { a: { GPU: 0 }, b: { GPU: 2 } } });
    expect(idx.lookup(h[0])?.residency).toEqual(new Map([["b", ["GPU"]]]));
    expect(idx.metrics.unknownRemovals).toBe(1);
  });

  it("reports stores whose parent it never saw", () => {
    const idx = new InMemoryKvIndex();
    expect(applyEvent(idx, "a", stored([5n], 4n)).orphanStores).toBe(1);
  });

  it("> 8 workers use the extended mask groups", () => {
    const idx = new InMemoryKvIndex();
    const h = H(3);
    for (let w = 0; w < 12; w++)
      applyEvent(idx, `w${w}`, stored(h.slice(0, 1 + (w % 3)), null, w % 2 ? "CPU_PINNED" : "GPU"));
    const o = idx.overlap(h);
    expect(o.workers.size).toBe(12);
    expect(o.workers.get("w11")?.tiered).toEqual({ GPU: 0, CPU_PINNED: 3, DISK: 0, EXTERNAL: 0 });
    expect(o.workers.get("w10")?.tiered).toEqual({ GPU: 2, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 });
  });
});

describe("Dynamo scoring", () => {
  it("hits_beyond counts shared positions >= n over sorted ranges", () => {
    const s = {
      ranges: [
        [0, 2],
        [4, 8],
      ] as [number, number][],
      totalHits: 6,
    };
    expect([0, 1, 2, 5, 8].map((n) => hitsBeyond(s, n))).toEqual([6, 5, 4, 3, 0]);
  });

  it("credits device 1.0, host 0.75, disk 0.25, shared beyond the device prefix; lowest logit wins", () => {
    const idx = new InMemoryKvIndex();
    const h = H(10);
    applyEvent(idx, "dev", stored(h.slice(0, 4), null, "GPU"));
    applyEvent(idx, "host", stored(h.slice(0, 8), null, "CPU_PINNED"));
    applyEvent(idx, "pool", stored(h, null, "EXTERNAL")); // the shared pool (e.g. Mooncake)
    const o = idx.overlap(h);
    expect(o.shared).toEqual({ ranges: [[0, 10]], totalHits: 10 });
    const s = scoreWorkers(o, ["dev", "host", "cold"], 64);
    expect(s.map((x) => x.logit)).toEqual([6, 4, 10]);
    expect(selectWorker(s)?.worker).toBe("host");
    const shared = scoreWorkers(o, ["dev", "host", "cold"], 64, {}, { sharedCacheMultiplier: 0.5 });
    // dev: 10 - (4 + 0.5*6) = 3; host: 10 - (6 + 0.5*10) = 0 -> max 0; cold: 10 - 5 = 5
    expect(shared.map((x) => x.logit)).toEqual([3, 0, 5]);
    expect(shared[0].sharedBeyond).toBe(6);
    // load: prefill tokens queued on host push it behind dev
    const loaded = scoreWorkers(o, ["dev", "host"], 64, { host: { activePrefillTokens: 64 * 5 } });
    expect(loaded.map((x) => x.logit)).toEqual([6, 9]);
    expect(selectWorker(loaded)?.worker).toBe("dev");
    expect(selectWorker(scoreWorkers(o, ["x", "y"], 64), {}, () => 0.99)?.worker).toBe("y");
    // the native scorer computes the same figures without building the overlap objects
    const cfgs = [{}, { sharedCacheMultiplier: 0.5 }];
    for (const cfg of cfgs)
      expect(idx.score(h, ["dev", "host", "cold"], 64, {}, cfg)).toEqual(
        scoreWorkers(o, ["dev", "host", "cold"], 64, {}, cfg),
      );
    expect(idx.score(h, ["dev", "host"], 64, { host: { activePrefillTokens: 64 * 5 } })).toEqual(
      loaded,
    );
    // candidate lists that grow past the scratch arrays' first size and shrink again
    const many = ["dev", "host", ...Array.from({ length: 20 }, (_, i) => `idle${i}`)];
    for (const cands of [many, ["cold", "host", "dev"], many, ["host"]]) {
      const loads = { host: { activePrefillTokens: 64 * 3 }, idle7: { decodeBlocks: 2 } };
      expect(idx.score(h, cands, 64, loads, { sharedCacheMultiplier: 0.5 })).toEqual(
        scoreWorkers(o, cands, 64, loads, { sharedCacheMultiplier: 0.5 }),
      );
    }
  });
});
