// The ideal floor's credit for a session's previous answer (bench/agent/measure.ts): SGLang caches
// the generated tokens after their prompt, so a prompt that continues its session's previous one
// may hit through them, and the floor must count that as a hit or a run can go under it.
import { describe, expect, it } from "vitest";
import { answerReach } from "../bench/agent/measure.js";

const PAGE = 16;
const seq = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

describe("the ideal floor credits a session's previous answer", () => {
  it("up to the last whole page of the previous prompt and its answer, when the prompt continues it", () => {
    const prev = { tokens: seq(40), completion: 30 };
    // 40 + 30 = 70 tokens cached: 4 whole pages.
    expect(answerReach(prev, [...seq(40), ...seq(50, 1000)], PAGE)).toBe(64);
    expect(answerReach({ tokens: seq(40), completion: 0 }, seq(90), PAGE)).toBe(32);
  });

  it("nothing for a first request, a prompt that departs from the previous one, or a shorter one", () => {
    expect(answerReach(undefined, seq(90), PAGE)).toBe(0);
    const edited = seq(90);
    edited[5] = -1;
    expect(answerReach({ tokens: seq(40), completion: 30 }, edited, PAGE)).toBe(0);
    expect(answerReach({ tokens: seq(40), completion: 30 }, seq(39), PAGE)).toBe(0);
  });
});
