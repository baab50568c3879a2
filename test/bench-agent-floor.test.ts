// The ideal floor's credit for a session's previous answer (bench/agent/measure.ts): SGLang caches
// the generated tokens after their prompt, so a prompt that continues its session's previous one
// may hit through them, and the floor must count that as a hit or a run can go under it.
import { describe, expect, it } from "vitest";
import type { RequestRecord } from "../bench/agent/driver.js";
import { answerReach, creditIdeal } from "../bench/agent/measure.js";

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

const rec = (session: string, o: Partial<RequestRecord> = {}): RequestRecord => ({
  session,
  kind: "answer",
  returning: false,
  promptTokens: 0,
  cachedTokens: 0,
  completionTokens: 0,
  hostTokens: 0,
  storageTokens: 0,
  ttftMs: 0,
  sentMs: 0,
  doneMs: 0,
  prompt: { messages: [], tools: [] },
  gapKind: "tool",
  gapMs: 0,
  rewrite: false,
  worker: null,
  ok: true,
  ...o,
});

describe("the ideal floor with the generated ids the worker returned", () => {
  const prompt = seq(40);
  const reasoning = seq(20, 500);
  const answer = seq(12, 900);
  const next = [...prompt, ...answer, ...seq(40, 2000)];

  it("credits an answer's pages only as far as the next prompt replays them", () => {
    // The template drops the reasoning: the next prompt leaves the generated sequence at its first token.
    const a = rec("s", { outputIds: [...reasoning, ...answer], completionTokens: 32 });
    const b = rec("s");
    const floor = creditIdeal([a, b], [prompt, next], PAGE);
    expect(b.idealCachedTokens).toBe(32);
    expect(floor).toMatchObject({ recomputed: 40 - 0 + next.length - 32, exact: 1, served: 2 });
    // Without the ids the same answer is credited whole: 40 + 32 generated = 4 whole pages.
    const c = rec("s", { completionTokens: 32 });
    const d = rec("s");
    creditIdeal([c, d], [prompt, next], PAGE);
    expect(d.idealCachedTokens).toBe(64);
  });

  it("credits every page the next prompt replays when the template keeps the generated sequence", () => {
    const a = rec("s", { outputIds: [...reasoning, ...answer] });
    const b = rec("s");
    creditIdeal([a, b], [prompt, [...prompt, ...reasoning, ...answer, ...seq(40, 2000)]], PAGE);
    expect(b.idealCachedTokens).toBe(64);
  });

  it("shares every prompt's pages across sessions, and counts a run that served more than the floor", () => {
    const a = rec("s1", { outputIds: answer });
    const b = rec("s2", { cachedTokens: 48 });
    const floor = creditIdeal([a, b], [prompt, [...prompt, ...seq(30, 3000)]], PAGE);
    expect(b.idealCachedTokens).toBe(32);
    expect(floor.undercut).toBe(1);
  });
});
