// kvctl sim's one mapping from segments to token ids: deterministic (pinned values, so a trace
// written today replays the same tokens tomorrow), below the vocabulary, a segment with real ids
// yields them, two seeds part at their first token but by chance, tokens spread evenly over the
// vocabulary, and bad segments are refused by name.
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  checkSegment,
  fillSegment,
  MAX_VOCAB,
  materialize,
  tokenOf,
} from "../src/sim/workload/tokens.js";

const LLAMA3 = 128256;
const digest = (a: Int32Array) =>
  createHash("sha256")
    .update(Buffer.from(a.buffer, a.byteOffset, a.byteLength))
    .digest("hex");

describe("sim workload tokens", () => {
  it("is a pure function of (seed, j, vocab), pinned", () => {
    const seeds = [0, 1, 2 ** 32, 2 ** 53 - 1];
    const first = seeds.map((s) => materialize([{ seed: s, len: 8 }], LLAMA3));
    expect(first.map((a) => [...a])).toEqual(
      seeds.map((s) => Array.from({ length: 8 }, (_, j) => tokenOf(s, j, LLAMA3))),
    );
    // Pinned: changing the mapping changes every generated trace's tokens (say so, re-pin).
    expect(first.map((a) => [...a.slice(0, 4)])).toMatchInlineSnapshot(`
      [
        [
          104453,
          85068,
          74341,
          14581,
        ],
        [
          115595,
          58793,
          29019,
          39308,
        ],
        [
          7189,
          21805,
          104136,
          16832,
        ],
        [
          61121,
          61308,
          48605,
          109233,
        ],
      ]
    `);
    expect(digest(materialize([{ seed: 7, len: 100_000 }], LLAMA3))).toMatchInlineSnapshot(
      `"63186c2b3133fdefb63c46782a3695aea6435908076ae77beb8a77151f675bd2"`,
    );
  });

  it("fills in place, a segment of the same seed is a prefix of a longer one, ids pass through", () => {
    const out = new Int32Array(40).fill(-1);
    let at = fillSegment({ seed: 5, len: 10 }, 1000, out, 0);
    at = fillSegment({ seed: 5, len: 20 }, 1000, out, at);
    at = fillSegment({ seed: 9, len: 3, ids: [7, 8, 999] }, 1000, out, at);
    expect(at).toBe(33);
    expect([...out.slice(0, 10)]).toEqual([...out.slice(10, 20)]);
    expect([...out.slice(30, 33)]).toEqual([7, 8, 999]);
    expect(out[33]).toBe(-1);
    expect(out.slice(0, 33).every((t) => t >= 0 && t < 1000)).toBe(true);
  });

  it("parts two seeds at their first token with chance 1/vocab, and never shares a page", () => {
    // A small vocabulary makes chance agreement measurable: 1/50 of 200,000 pairs is 4,000.
    const pairs = 200_000;
    let agree = 0;
    for (let s = 0; s < pairs; s++) if (tokenOf(s, 0, 50) === tokenOf(s + 1, 0, 50)) agree++;
    const expected = pairs / 50;
    expect(Math.abs(agree - expected)).toBeLessThan(5 * Math.sqrt(expected));
    // Seeds that differ only in their high word, or by one, never share a 16-token page.
    const page = (s: number) => [...materialize([{ seed: s, len: 16 }], LLAMA3)].join(",");
    for (let s = 1; s <= 2000; s++) {
      expect(page(s)).not.toBe(page(s + 1));
      expect(page(s)).not.toBe(page(s + 2 ** 32));
      expect(page(s)).not.toBe(page(s * 2 ** 21));
    }
  });

  it("spreads tokens evenly over the vocabulary (chi-square over 64 buckets)", () => {
    const vocab = 64;
    const counts = new Array(vocab).fill(0);
    for (let s = 0; s < 1000; s++)
      for (const t of materialize([{ seed: s * 7919, len: 1000 }], vocab)) counts[t]++;
    const n = 1_000_000 / vocab;
    const chi2 = counts.reduce((x, c) => x + (c - n) ** 2 / n, 0);
    // 63 degrees of freedom: the 99.99th percentile is about 115.
    expect(chi2).toBeLessThan(115);
    // Within one segment, neighbouring tokens are independent too.
    const a = materialize([{ seed: 3, len: 200_000 }], 2);
    let same = 0;
    for (let j = 1; j < a.length; j++) if (a[j] === a[j - 1]) same++;
    expect(Math.abs(same - 100_000)).toBeLessThan(5 * Math.sqrt(50_000));
  });

  it("refuses a bad vocabulary, seed, length, ids or offset, naming it", () => {
    const out = new Int32Array(4);
    expect(() => tokenOf(1, 0, 1)).toThrow(/vocab/);
    expect(() => tokenOf(1, 0, MAX_VOCAB + 1)).toThrow(/vocab/);
    expect(() => tokenOf(-1, 0, 10)).toThrow(/seed/);
    expect(() => tokenOf(2 ** 53, 0, 10)).toThrow(/seed/);
    expect(() => tokenOf(1, -1, 10)).toThrow(/^RangeError: j|j:/);
    expect(() => checkSegment({ seed: 1, len: 0 }, 10)).toThrow(/len/);
    expect(() => checkSegment({ seed: 1, len: 2, ids: [1] }, 10)).toThrow(/ids/);
    expect(() => checkSegment({ seed: 1, len: 1, ids: [10] }, 10)).toThrow(/ids/);
    expect(() => fillSegment({ seed: 1, len: 5 }, 10, out, 0)).toThrow(/overrun/);
    expect(() => fillSegment({ seed: 1, len: 2 }, 10, out, 3)).toThrow(/overrun/);
    expect([...out]).toEqual([0, 0, 0, 0]);
  });
});
