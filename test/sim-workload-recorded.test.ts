// bench:agent's recorded runs as sim workloads: every request's prompt and output materialize to
// exactly the ids the real worker saw and generated, tokens several requests share become one
// segment, each request waits what the run planned (start offset, tool run, human gap) with its
// reasoning span and cache marker, the workload round-trips through the JSONL trace format, and a
// record a replay cannot use is refused by line and field. The real-server proof (a
// `bench:agent --smoke` run's own trace) is in test/bench-agent-smoke.test.ts.
import { describe, expect, it } from "vitest";
import {
  parseRecordedRun,
  type RecordedRequest,
  recordedWorkload,
} from "../src/sim/workload/recorded.js";
import { materialize } from "../src/sim/workload/tokens.js";
import { TraceError } from "../src/sim/workload/trace/format.js";
import { readTrace } from "../src/sim/workload/trace/read.js";
import { writeTrace } from "../src/sim/workload/trace/write.js";
import { expectReplays } from "./helpers/recorded-replay.js";

const SYS = [5, 6, 7, 8, 9, 10];
const rec = (o: Record<string, unknown>) =>
  JSON.stringify({
    session: "a",
    kind: "tool",
    ok: true,
    promptTokens: 0,
    cachedTokens: 0,
    rewrite: false,
    ...o,
  });
// Two sessions sharing a system prompt; a's second request replays its first answer's last token.
const lines = [
  rec({
    session: "a",
    sentMs: 100,
    gapKind: "start",
    gapMs: 100,
    promptIds: [...SYS, 1, 2],
    promptTokens: 8,
    outputIds: [40, 41, 42],
    reasoningTokens: 2,
    cacheMarker: { tokens: 6, ttlS: 3600 },
  }),
  rec({
    session: "b",
    sentMs: 150,
    gapKind: "start",
    gapMs: 150,
    promptIds: [...SYS, 3],
    promptTokens: 7,
    outputIds: [50],
  }),
  rec({
    session: "a",
    sentMs: 900,
    gapKind: "tool",
    gapMs: 700,
    tool: "ls",
    promptIds: [...SYS, 1, 2, 42, 11, 12],
    promptTokens: 11,
    outputIds: [60, 61],
    rewrite: true,
  }),
];

describe("sim recorded runs", () => {
  it("replays the recorded ids exactly, after the recorded waits", () => {
    const records = parseRecordedRun(lines.join("\n"), 100);
    const w = recordedWorkload(records, { vocab: 100, name: "t" });
    expectReplays(w, records);
    const [a, b] = w.programs;
    expect([a.id, a.startS, b.id, b.startS]).toEqual(["a", 0.1, "b", 0.15]);
    expect(a.requests.map((r) => [r.gapS, r.gapKind, r.tool, r.rewrite])).toEqual([
      [0, "start", undefined, undefined],
      [0.7, "tool", "ls", true],
    ]);
    expect(a.requests[0].reasoningTokens).toBe(2);
    expect(a.requests[0].cacheMarker).toEqual({ tokens: 6, ttlS: 3600 });
    expect(b.requests[0].cacheMarker).toBeUndefined();
    // The shared system prompt is one segment of one seed in both sessions.
    expect(a.requests[0].prompt[0]).toEqual(b.requests[0].prompt[0]);
    expect(a.requests[0].prompt[0].len).toBe(SYS.length);
    // a's second prompt shares its first prompt's segments, then parts inside the first answer.
    expect(a.requests[1].prompt.slice(0, 2)).toEqual(a.requests[0].prompt);
    expect(w.meta).toMatchObject({ requests: 3, reasoning_recorded: true, markers_recorded: true });
  });

  it("writes and reads back through the JSONL trace format, ids and all", () => {
    const w = recordedWorkload(parseRecordedRun(lines.join("\n"), 100), { vocab: 100 });
    const text = writeTrace(w, { blockSize: 2 });
    expect(readTrace(text)).toEqual(w);
    expect(writeTrace(readTrace(text), { blockSize: 2 })).toBe(text);
    expect([...materialize(readTrace(text).programs[0].requests[1].prompt, 100)]).toEqual([
      ...SYS,
      1,
      2,
      42,
      11,
      12,
    ]);
  });

  it("refuses a record a replay cannot use, naming its line and field", () => {
    const bad = (n: number, o: Record<string, unknown>, field: string, why: RegExp) => {
      const edited = lines.map((l, i) =>
        i === n - 1 ? JSON.stringify({ ...JSON.parse(l), ...o }) : l,
      );
      let err: unknown;
      try {
        recordedWorkload(parseRecordedRun(edited.join("\n"), 100), { vocab: 100 });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(TraceError);
      expect([(err as TraceError).line, (err as TraceError).field]).toEqual([n, field]);
      expect((err as Error).message).toMatch(why);
    };
    bad(2, { ok: false }, "ok", /failed/);
    bad(2, { promptIds: undefined }, "promptIds", /absent/);
    bad(2, { outputIds: undefined }, "outputIds", /no generated ids/);
    bad(2, { promptIds: [1, 100] }, "promptIds[1]", /\[0, 99\]/);
    bad(3, { gapKind: "nap" }, "gapKind", /unknown/);
    bad(2, { gapKind: "tool" }, "gapKind", /not its start/);
    bad(3, { gapMs: -1 }, "gapMs", />= 0/);
    bad(1, { cacheMarker: { tokens: -1, ttlS: 1 } }, "cacheMarker.tokens", /integer/);
    expect(() => parseRecordedRun("\n", 100)).toThrow(TraceError);
    expect(() => parseRecordedRun(lines[0], 1)).toThrow(/^vocab:/);
    const parsed: RecordedRequest[] = parseRecordedRun(lines.join("\n"), 100);
    expect(parsed.map((r) => r.line)).toEqual([1, 2, 3]);
  });
});
