// Randomised differential test: the native index (native/index, through the InMemoryKvIndex
// facade and whole frames) and a plain Map model driven by the same random event streams (stores
// with parents, removes, clears, tier moves, duplicates, out-of-order and orphan stores), with
// every apply's counts, every lookup and every request's overlap and Dynamo score compared. A
// pool of ~2 000 hashes churning in tables of a few thousand slots exercises the probe runs and
// the backward-shift deletion path; chains stored in short runs by several workers, with records
// given back and reused, exercise every step of the request walk (the next record, the child
// hint, stale hints, the hash index).
import { describe, expect, it } from "vitest";
import { encodeBatch } from "../src/events/encode.js";
import type { KvEvent, Tier } from "../src/events/types.js";
import { TIERS } from "../src/events/types.js";
import {
  InMemoryKvIndex,
  scoreWorkers,
  type OverlapResult,
  type WorkerOverlap,
} from "../src/index/index.js";

const SHARED: Tier = "EXTERNAL";

/** The model: every block's parent and per-worker tier bits, in plain Maps. */
class MapModel {
  readonly nodes = new Map<bigint, { parent: bigint | null; masks: Map<string, number> }>();
  readonly names: string[] = [];
  private known(w: string) {
    if (!this.names.includes(w)) this.names.push(w);
  }
  add(w: string, tier: Tier, hashes: bigint[], parent: bigint | null) {
    this.known(w);
    const r = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0 };
    if (parent !== null && !this.nodes.has(parent)) r.orphanStores++;
    const bit = 1 << TIERS.indexOf(tier);
    let p = parent;
    for (const h of hashes) {
      let n = this.nodes.get(h);
      if (!n) this.nodes.set(h, (n = { parent: p, masks: new Map() }));
      const m = n.masks.get(w) ?? 0;
      if (!(m & bit)) {
        n.masks.set(w, m | bit);
        r.added++;
      }
      p = h;
    }
    return r;
  }
  evict(w: string, tier: Tier, hashes: bigint[]) {
    this.known(w);
    const r = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0 };
    const bit = 1 << TIERS.indexOf(tier);
    for (const h of hashes) {
      const n = this.nodes.get(h);
      const m = n?.masks.get(w) ?? 0;
      if (!n || !(m & bit)) {
        r.unknownRemovals++;
        continue;
      }
      if (m & ~bit) n.masks.set(w, m & ~bit);
      else n.masks.delete(w);
      r.removed++;
      if (n.masks.size === 0) this.nodes.delete(h);
    }
    return r;
  }
  clear(w: string) {
    let removed = 0;
    for (const [h, n] of this.nodes) {
      const m = n.masks.get(w) ?? 0;
      for (let b = m; b; b &= b - 1) removed++;
      n.masks.delete(w);
      if (n.masks.size === 0) this.nodes.delete(h);
    }
    return removed;
  }
  tiers(w: string) {
    const t = { GPU: 0, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 };
    for (const n of this.nodes.values()) {
      const m = n.masks.get(w) ?? 0;
      TIERS.forEach((tier, i) => {
        t[tier] += (m >> i) & 1;
      });
    }
    return t;
  }
  /** Overlap by definition, worker by worker (no shared early exits). */
  overlap(req: bigint[]): OverlapResult {
    const workers = new Map<string, WorkerOverlap>();
    const sharedBit = 1 << TIERS.indexOf(SHARED);
    const firstMissing = req.findIndex((h) => !this.nodes.has(h));
    const reach = firstMissing < 0 ? req.length : firstMissing;
    for (const w of this.names) {
      const perTier = { GPU: 0, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 };
      const tiered = { GPU: 0, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 };
      TIERS.forEach((t, ti) => {
        let k = 0;
        while (k < reach && ((this.nodes.get(req[k])?.masks.get(w) ?? 0) >> ti) & 1) k++;
        perTier[t] = k;
      });
      let st = 0;
      for (let i = 0; i < reach && st < 4; i++) {
        const m = this.nodes.get(req[i])?.masks.get(w) ?? 0;
        while (st < 4 && !(m & (1 << st))) st++;
        if (st < 4) tiered[TIERS[st]]++;
      }
      const sum =
        Object.values(perTier).reduce((a, b) => a + b, 0) +
        tiered.CPU_PINNED +
        tiered.DISK +
        tiered.EXTERNAL;
      if (sum) workers.set(w, { perTier, tiered });
    }
    const ranges: [number, number][] = [];
    let total = 0;
    let start = -1;
    req.forEach((h, i) => {
      const n = this.nodes.get(h);
      const shared = !!n && [...n.masks.values()].some((m) => m & sharedBit);
      if (shared) {
        total++;
        if (start < 0) start = i;
      } else if (start >= 0) {
        ranges.push([start, i]);
        start = -1;
      }
    });
    if (start >= 0) ranges.push([start, req.length]);
    return { requestBlocks: req.length, workers, shared: { ranges, totalHits: total } };
  }
}

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

describe("native index vs a Map model (randomised, differential)", () => {
  for (const seed of [1, 2, 3]) {
    it(`seed ${seed}: every count, lookup, overlap and score agrees`, () => {
      const rand = rng(seed * 7919);
      const pick = <T>(a: readonly T[]) => a[Math.floor(rand() * a.length)];
      const CHAINS = 64;
      const LEN = 32;
      // Chains of hashes; high bits make both signs appear on the wire.
      const chains = Array.from({ length: CHAINS }, (_, c) =>
        Array.from({ length: LEN }, (_, i) =>
          BigInt.asIntN(
            64,
            (BigInt(c * 2654435761) << 32n) ^ BigInt(c * LEN + i + 1) ^ (BigInt(seed) << 60n),
          ),
        ),
      );
      const idx = new InMemoryKvIndex();
      const model = new MapModel();
      // seed 3: more than 16 workers, so masks span two words (and the table is rebuilt wider)
      const workers = Array.from({ length: seed === 3 ? 20 : 5 }, (_, i) => `w${i}`);
      const history: KvEvent[][] = [];
      const applyBoth = (w: string, events: KvEvent[], viaFrame: boolean) => {
        const want = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0 };
        const sum = (r: typeof want) => {
          want.added += r.added;
          want.removed += r.removed;
          want.unknownRemovals += r.unknownRemovals;
          want.orphanStores += r.orphanStores;
        };
        const got = { added: 0, removed: 0, unknownRemovals: 0, orphanStores: 0 };
        if (viaFrame) {
          const r = idx.applyFrame(w, encodeBatch({ ts: 1, dpRank: 0, events }));
          expect(r.ok && r.badEvents === 0).toBe(true);
          Object.assign(got, {
            added: r.added,
            removed: r.removed,
            unknownRemovals: r.unknownRemovals,
            orphanStores: r.orphanStores,
          });
        }
        for (const e of events) {
          if (e.type === "BlockStored") {
            sum(model.add(w, e.tier, e.blockHashes, e.parentBlockHash));
            if (!viaFrame) {
              const r = idx.add(w, e.tier, e.blockHashes, e.parentBlockHash);
              got.added += r.added;
              got.orphanStores += r.orphanStores;
            }
          } else if (e.type === "BlockRemoved") {
            sum(model.evict(w, e.tier, e.blockHashes));
            if (!viaFrame) {
              const r = idx.evict(w, e.tier, e.blockHashes);
              got.removed += r.removed;
              got.unknownRemovals += r.unknownRemovals;
            }
          } else {
            want.removed += model.clear(w);
            if (!viaFrame) got.removed += idx.clear(w);
          }
        }
        expect(got).toEqual(want);
      };
      const stored = (c: number, s: number, len: number, tier: Tier, orphan: boolean): KvEvent => ({
        type: "BlockStored",
        blockHashes: chains[c].slice(s, s + len),
        parentBlockHash: orphan ? BigInt(-1 - c) : s > 0 ? chains[c][s - 1] : null,
        tokenIds: [],
        blockSize: 64,
        loraId: null,
        medium: tier,
        tier,
        cacheSalt: null,
        sessionId: null,
        loraName: null,
        bigram: false,
      });
      const removed = (hashes: bigint[], tier: Tier): KvEvent => ({
        type: "BlockRemoved",
        blockHashes: hashes,
        medium: tier,
        tier,
      });
      for (let op = 0; op < 2500; op++) {
        const w = pick(workers);
        const c = Math.floor(rand() * CHAINS);
        const s = Math.floor(rand() * LEN);
        const len = 1 + Math.floor(rand() * Math.min(8, LEN - s));
        const tier = pick(TIERS);
        const r = rand();
        let events: KvEvent[];
        if (r < 0.45) events = [stored(c, s, len, tier, rand() < 0.05)];
        else if (r < 0.7) events = [removed(chains[c].slice(s, s + len), tier)];
        else if (r < 0.8) {
          // tier move: host copy stored, device copy removed, in one batch
          events = [
            stored(c, s, len, "CPU_PINNED", false),
            removed(chains[c].slice(s, s + len), "GPU"),
          ];
        } else if (r < 0.88 && history.length)
          events = pick(history); // duplicate of an earlier batch
        else if (r < 0.92) {
          // out of order: a child before its parent
          const s2 = Math.min(s + len, LEN - 1);
          events = [stored(c, s2, 1, tier, false), stored(c, s, Math.max(1, s2 - s), tier, false)];
        } else if (r < 0.95 && s + len < LEN) {
          // one chain over several events, as SGLang batches it (each event's parent is the block the
          // one before stored); sometimes that block is removed in between, which can orphan the next
          const rest = 1 + Math.floor(rand() * Math.min(8, LEN - s - len));
          const between = rand() < 0.5 ? [removed([chains[c][s + len - 1]], tier)] : [];
          events = [
            stored(c, s, len, tier, false),
            ...between,
            stored(c, s + len, rest, tier, false),
          ];
        } else if (r < 0.97) events = [{ type: "AllBlocksCleared" }];
        else events = [removed([BigInt(op) << 20n], tier)]; // a block never stored
        history.push(events);
        applyBoth(w, events, rand() < 0.5);
        if (op % 25 === 0 || op === 2499) {
          const stats = idx.stats();
          expect(stats.blocks).toBe(model.nodes.size);
          for (const wk of model.names) expect(stats.workers[wk]).toEqual(model.tiers(wk));
          for (const chain of chains.slice(0, 16)) {
            for (const h of chain) {
              const n = model.nodes.get(h);
              const got = idx.lookup(h);
              if (!n) expect(got).toBeUndefined();
              else {
                expect(got?.parent).toBe(n.parent);
                const res = new Map(
                  [...n.masks].map(([wk, m]) => [wk, TIERS.filter((_, i) => m & (1 << i))]),
                );
                expect(got?.residency).toEqual(res);
              }
            }
          }
          for (let q = 0; q < 20; q++) {
            const cc = Math.floor(rand() * CHAINS);
            const req = chains[cc].slice(0, 1 + Math.floor(rand() * LEN));
            if (rand() < 0.2) req.splice(Math.floor(rand() * req.length), 1, 12345n); // a foreign block
            const want = model.overlap(req);
            expect(idx.overlap(req)).toEqual(want);
            const cfg = pick([
              {},
              { sharedCacheMultiplier: 0.5 },
              { overlapScoreCreditDecay: 0.3 },
              { externalAsDisk: true },
            ]);
            const loads = {
              w1: { activePrefillTokens: 640 },
              w2: { decodeBlocks: 3, activeRequests: 2 },
            };
            const cands = [...workers, "never-seen"];
            expect(idx.score(req, cands, 64, loads, cfg)).toEqual(
              scoreWorkers(want, cands, 64, loads, cfg),
            );
          }
        }
      }
      expect(model.nodes.size).toBeGreaterThan(0);
    });
  }
});
