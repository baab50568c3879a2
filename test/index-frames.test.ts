// applyFrames (several workers' frames in one call; with verification on, two frames' hash chains
// are recomputed side by side) against applyFrame one frame after the other, on random frame
// streams: chains shared between workers, removals and clears between stores, engine hashes that
// differ from the token-derived ones (two workers publishing the same tokens under different
// hashes: the token-hash map then depends on frame order), salted chains, bad events and refused
// frames. Every frame's result, every lookup (by engine and by token hash), the counters and the
// overlaps must agree.
import { describe, expect, it } from "vitest";
import { encodeBatch } from "../src/events/encode.js";
import type { KvEvent, Tier } from "../src/events/types.js";
import { blockHashes } from "../src/hash/sglang.js";
import { InMemoryKvIndex } from "../src/index/index.js";
import { rng } from "./helpers/random.js";
import { blockStored } from "./helpers/kv-events.js";

const PAGE = 4;
const LEN = 12;

/** Seeded uniform [0, 1) from the tests' xorshift32. */
function uniform(seed: number): () => number {
  const next = rng(seed);
  return () => next() / 2 ** 32;
}

interface Chain {
  tokens: number[];
  hashes: bigint[];
  salt: string | null;
}

describe("applyFrames vs applyFrame, one frame after the other (randomised, differential)", () => {
  for (const verify of [true, false]) {
    for (const seed of [1, 2, 3]) {
      it(`verify ${verify}, seed ${seed}: every frame's result, lookup, counter and overlap agrees`, () => {
        const rand = uniform(seed * 104729 + (verify ? 1 : 0));
        const pick = <T>(a: readonly T[]) => a[Math.floor(rand() * a.length)];
        const chains: Chain[] = [];
        for (let c = 0; c < 10; c++) {
          const salt = c === 5 ? "salt" : null;
          // chains 6..9 carry chain 0 and 1's tokens under made-up engine hashes (two sets), so two
          // engine hashes stand for one token-derived hash and the token-hash map depends on order
          const tokens =
            c >= 6
              ? chains[c % 2].tokens
              : Array.from({ length: LEN * PAGE }, () => Math.floor(rand() * 50_000));
          const real = Array.from(
            blockHashes(Uint32Array.from(tokens), { pageSize: PAGE, cacheSalt: salt ?? undefined }),
          );
          const hashes =
            c >= 6
              ? real.map((_, i) => BigInt.asIntN(64, (BigInt(c) << 40n) | BigInt(i + 1)))
              : real;
          chains.push({ tokens, hashes, salt });
        }
        // chain 10: chain 6's engine hashes over other tokens (a worker that disagrees): which
        // digest a block keeps depends on which frame stored it first
        chains.push({
          tokens: Array.from({ length: LEN * PAGE }, () => Math.floor(rand() * 50_000)),
          hashes: chains[6].hashes,
          salt: null,
        });
        const workers = ["w0", "w1", "w2", "w3"];
        const stored = (ch: Chain, s: number, len: number, tier: Tier): KvEvent => ({
          type: "BlockStored",
          blockHashes: ch.hashes.slice(s, s + len),
          parentBlockHash: s > 0 ? ch.hashes[s - 1] : null,
          tokenIds: ch.tokens.slice(s * PAGE, (s + len) * PAGE),
          blockSize: PAGE,
          loraId: null,
          medium: tier,
          tier,
          cacheSalt: ch.salt,
          sessionId: null,
          loraName: null,
          bigram: false,
        });
        const frame = (): Uint8Array => {
          const r = rand();
          if (r < 0.03) return Buffer.from([0x93, 0xc1]); // refused whole
          const events: KvEvent[] = [];
          const ch = pick(chains);
          let s = Math.floor(rand() * (LEN - 1));
          for (let n = 1 + Math.floor(rand() * 4); n > 0 && s < LEN; n--) {
            const len = 1 + Math.floor(rand() * Math.min(3, LEN - s));
            const q = rand();
            if (q < 0.75)
              events.push(stored(ch, s, len, pick(["GPU", "GPU", "CPU_PINNED"] as Tier[])));
            else if (q < 0.93)
              events.push({
                type: "BlockRemoved",
                blockHashes: ch.hashes.slice(Math.max(0, s - 1), s + len),
                medium: "GPU",
                tier: "GPU",
              });
            else events.push({ type: "AllBlocksCleared" });
            s += len;
          }
          const buf = encodeBatch({ ts: 1, dpRank: 0, events });
          if (rand() < 0.05) {
            // a bad event in front: the rest of the frame still applies
            return Buffer.concat([
              Buffer.from([
                0x93,
                0xcb,
                0x3f,
                0xf0,
                0,
                0,
                0,
                0,
                0,
                0,
                0x90 + events.length + 1,
                0xc0,
              ]),
              buf.subarray(11),
            ]);
          }
          return buf;
        };
        const one = new InMemoryKvIndex({ verify });
        const many = new InMemoryKvIndex({ verify });
        for (let turn = 0; turn < 600; turn++) {
          const batch = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => ({
            worker: pick(workers),
            payload: frame(),
          }));
          const want = batch.map((f) => one.applyFrame(f.worker, f.payload));
          expect(many.applyFrames(batch)).toEqual(want);
        }
        expect(many.stats()).toEqual(one.stats());
        for (const w of workers) expect(many.counters(w)).toEqual(one.counters(w));
        for (const ch of chains) {
          for (const h of ch.hashes) {
            const got = many.lookup(h);
            expect(got).toEqual(one.lookup(h));
            if (got?.tokenHash != null)
              expect(many.lookup(got.tokenHash)).toEqual(one.lookup(got.tokenHash));
          }
          expect(many.overlap(ch.hashes)).toEqual(one.overlap(ch.hashes));
        }
        if (verify) expect(one.stats().hashMismatches).toBeGreaterThan(0);
      });
    }
  }

  it("two lanes that map one token hash to different engine hashes leave it mapped as frame order does", () => {
    // Frame 0's chain is long, frame 1's one page: frame 1 is done first, yet frame 0 comes first.
    const tokens = Array.from({ length: 8 * PAGE }, (_, i) => 1000 + i);
    const made = (base: bigint) => Array.from({ length: 8 }, (_, i) => base + BigInt(i));
    const ev = (hashes: bigint[]): KvEvent =>
      blockStored({
        blockHashes: hashes,
        tokenIds: tokens.slice(0, hashes.length * PAGE),
        blockSize: PAGE,
      });
    const frames = [
      { worker: "a", payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(made(1000n))] }) },
      {
        worker: "b",
        payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(made(2000n).slice(0, 1))] }),
      },
    ];
    const one = new InMemoryKvIndex({ verify: true });
    const many = new InMemoryKvIndex({ verify: true });
    const want = frames.map((f) => one.applyFrame(f.worker, f.payload));
    expect(many.applyFrames(frames)).toEqual(want);
    const th = one.lookup(1000n)?.tokenHash as bigint;
    expect(one.lookup(th)?.hash).toBe(2000n);
    expect(many.lookup(th)).toEqual(one.lookup(th));
  });

  it("a later frame's held-back token-hash changes land before a frame that starts after the earlier one ends", () => {
    // Frame 1 finishes first and holds its change back; frame 2 (frame 0's worker) waits for frame
    // 0, then runs on its lane: frame 1's change must land before frame 2's.
    const tokens = Array.from({ length: 8 * PAGE }, (_, i) => 3000 + i);
    const ev = (base: bigint, pages: number): KvEvent =>
      blockStored({
        blockHashes: Array.from({ length: pages }, (_, i) => base + BigInt(i)),
        tokenIds: tokens.slice(0, pages * PAGE),
        blockSize: PAGE,
      });
    const frames = [
      { worker: "a", payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(1000n, 8)] }) },
      { worker: "b", payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(2000n, 1)] }) },
      { worker: "a", payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(3000n, 1)] }) },
    ];
    const one = new InMemoryKvIndex({ verify: true });
    const many = new InMemoryKvIndex({ verify: true });
    const want = frames.map((f) => one.applyFrame(f.worker, f.payload));
    expect(many.applyFrames(frames)).toEqual(want);
    const th = one.lookup(1000n)?.tokenHash as bigint;
    expect(one.lookup(th)?.hash).toBe(3000n);
    expect(many.lookup(th)).toEqual(one.lookup(th));
  });

  it("two frames that name one block are applied one after the other, whatever their lengths", () => {
    // Both store block 0 from other tokens; frame 1's one page would be hashed first beside frame 0.
    const t0 = Array.from({ length: 4 * PAGE }, (_, i) => 5000 + i);
    const t1 = Array.from({ length: PAGE }, (_, i) => 9000 + i);
    const hashes = Array.from(blockHashes(Uint32Array.from(t0), { pageSize: PAGE }));
    const ev = (hs: bigint[], tokens: number[]): KvEvent =>
      blockStored({ blockHashes: hs, tokenIds: tokens, blockSize: PAGE });
    const frames = [
      { worker: "a", payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(hashes, t0)] }) },
      {
        worker: "b",
        payload: encodeBatch({ ts: 1, dpRank: 0, events: [ev(hashes.slice(0, 1), t1)] }),
      },
    ];
    const one = new InMemoryKvIndex({ verify: true });
    const many = new InMemoryKvIndex({ verify: true });
    const want = frames.map((f) => one.applyFrame(f.worker, f.payload));
    expect(many.applyFrames(frames)).toEqual(want);
    expect(one.lookup(hashes[0])?.tokenHash).toBe(hashes[0]);
    expect(many.lookup(hashes[0])).toEqual(one.lookup(hashes[0]));
  });
});
