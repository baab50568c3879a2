// bench:agent's own families as sim programs: a planned session becomes the requests bench:agent's
// driver sends (a tool call per step, then the answer; the reasoning dropped and the answer kept in
// the next prompt; compaction rewriting the history), after the planned waits, with the system
// prompt and a class's tool schemas shared across sessions; and the real families load from
// bench:agent's own loaders (BFCL's data, mini-swe-agent's harness) and plan with its generator.
import { describe, expect, it } from "vitest";
import { planWorkload } from "../bench/agent/workload.js";
import { familyShape, loadFamily } from "../bench/agent/families.js";
import { benchFamilyWorkload } from "../bench/sim-workloads.js";
import {
  agentFamilyWorkload,
  MESSAGE_OVERHEAD_TOKENS,
  type PlannedAgentSession,
} from "../src/sim/workload/agent-families.js";
import { segmentsLength } from "../src/sim/workload/tokens.js";

const call = (name: string, toolMs: number, compactBefore = false) => ({
  name,
  arguments: { path: "a" },
  result: "r".repeat(400),
  toolMs,
  compactBefore,
  reasoningChars: 0,
});
const session = (id: string, tools: unknown[]): PlannedAgentSession => ({
  id,
  startMs: 2000,
  tools,
  turns: [
    {
      user: "u".repeat(80),
      idleMs: 0,
      compact: false,
      calls: [call("ls", 1500), call("cat", 2500)],
      reasoningChars: 48,
      answerChars: 72,
    },
    {
      user: "v".repeat(40),
      idleMs: 30_000,
      compact: false,
      calls: [call("grep", 500, true)],
      reasoningChars: 48,
      answerChars: 72,
    },
    {
      user: "w".repeat(40),
      idleMs: 60_000,
      compact: false,
      calls: [],
      reasoningChars: 48,
      answerChars: 72,
    },
  ],
});

describe("sim bench families: rendering a planned session", () => {
  const tools = [{ type: "function", function: { name: "ls" } }];
  const w = agentFamilyWorkload(
    [session("a", tools), session("b", tools), session("c", [{ other: 1 }])],
    { family: "bfcl", system: "s".repeat(400), charsPerToken: 4 },
  );
  const [a, , c] = w.programs;

  it("sends a request per tool call and one per answer, after the planned waits", () => {
    expect(a.startS).toBe(2);
    expect(a.requests.map((r) => [r.gapKind, r.gapS, r.tool])).toEqual([
      ["start", 0, undefined],
      ["tool", 1.5, "ls"],
      ["tool", 2.5, "cat"],
      ["human", 30, undefined],
      ["tool", 0.5, "grep"],
      ["human", 60, undefined],
    ]);
    expect(a.requests.map((r) => r.rewrite === true)).toEqual([
      false,
      false,
      false,
      true,
      false,
      false,
    ]);
  });

  it("keeps each answer in the next prompt but not its reasoning, and sizes text by the estimate", () => {
    const [, ans, , ,] = a.requests;
    expect(ans.prompt.length).toBe(a.requests[0].prompt.length + 2);
    const seeds = (r: (typeof a.requests)[0]) => new Set(r.prompt.map((s) => s.seed));
    // The first tool call's output is its prompt's next segment, then the tool's result.
    expect(seeds(ans).has(a.requests[0].output[0].seed)).toBe(true);
    const answer = a.requests[4];
    expect(answer.output.length).toBe(2);
    expect(answer.reasoningTokens).toBe(answer.output[0].len);
    expect(answer.reasoningTokens).toBe(12);
    const next = a.requests[5];
    expect(seeds(next).has(answer.output[1].seed)).toBe(true);
    expect(seeds(next).has(answer.output[0].seed)).toBe(false);
    // 400 characters at 4 a token, plus the role markers.
    expect(a.requests[0].prompt[0].len).toBe(100 + MESSAGE_OVERHEAD_TOKENS);
    expect(a.requests[1].prompt.at(-1)?.len).toBe(100 + MESSAGE_OVERHEAD_TOKENS);
  });

  it("compacts where planned: the history becomes a summary and the request being worked on", () => {
    const before = a.requests[2];
    const after = a.requests[3];
    // system, tools, then the summary exchange and the request being worked on.
    expect(after.prompt.length).toBe(2 + 3);
    expect(segmentsLength(after.prompt)).toBeLessThan(segmentsLength(before.prompt));
    expect(after.prompt.slice(0, 2)).toEqual(before.prompt.slice(0, 2));
  });

  it("shares the system prompt across sessions, and the tool schemas across sessions of one tool set", () => {
    const first = w.programs.map((p) => p.requests[0].prompt);
    expect(new Set(first.map((p) => p[0].seed)).size).toBe(1);
    expect(first[0][1]).toEqual(first[1][1]);
    expect(first[2][1].seed).not.toBe(first[0][1].seed);
    // The bench marks its system message: the marker covers the system prompt and the tools.
    expect(c.requests[0].cacheMarker?.tokens).toBe(first[2][0].len + first[2][1].len);
    // Generated text is each session's own.
    expect(a.requests[0].output[0].seed).not.toBe(w.programs[1].requests[0].output[0].seed);
  });
});

describe("sim bench families: bench:agent's own data", () => {
  it("renders BFCL sessions as bench:agent plans them", () => {
    const o = { family: "bfcl" as const, sessions: 6, seed: 7 };
    const w = benchFamilyWorkload(o);
    const data = loadFamily({ ...o, toolsPerClass: 5, codingSteps: 40, codingReadLines: 20 });
    const plan = planWorkload(data, { ...familyShape("bfcl", 0, 1), charsPerToken: 4 }, 7);
    expect(w.programs.map((p) => p.id).sort()).toEqual(plan.map((s) => s.id).sort());
    for (const s of plan) {
      const p = w.programs.find((x) => x.id === s.id)!;
      expect(p.startS).toBeCloseTo(s.startMs / 1000, 9);
      expect(p.requests.length).toBe(s.turns.reduce((n, t) => n + t.calls.length + 1, 0));
      const tools = s.turns.flatMap((t) => t.calls.map((c) => [c.name, c.toolMs / 1000]));
      expect(p.requests.filter((r) => r.gapKind === "tool").map((r) => [r.tool, r.gapS])).toEqual(
        tools,
      );
    }
    expect(new Set(w.programs.map((p) => p.requests[0].prompt[0].seed)).size).toBe(1);
    expect(w.meta).toMatchObject({ family: "bfcl", tokens: "estimate", sessions: 6 });
  });

  it("renders coding sessions, each step reasoning before its call", () => {
    const w = benchFamilyWorkload({
      family: "coding",
      sessions: 2,
      seed: 3,
      codingSteps: 4,
      codingReadLines: 4,
    });
    const tool = w.programs.flatMap((p) => p.requests.filter((r) => r.gapKind !== "human"));
    expect(tool.length).toBeGreaterThanOrEqual(8);
    expect(tool.every((r) => r.reasoningTokens > 0 && r.output.length === 2)).toBe(true);
    expect(w.programs.every((p) => p.family === "coding")).toBe(true);
  });
});
