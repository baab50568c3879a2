// kvctl sim's JSONL trace format: a workload written and read back is the same workload and the
// same bytes; real ids are written once per seed and referred to after; NVIDIA Dynamo 1.6.1's own
// replay reads the files we write (same sessions, lengths, gaps, shared prefixes) and we read its
// Mooncake fixtures as it does; every malformed line is refused naming its line and field, and a
// refused file or workload leaves nothing behind.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { dynamoSite, packageRoot, venvPython } from "../src/paths.js";
import type { SimWorkload } from "../src/sim/types.js";
import { generateWorkload } from "../src/sim/workload/generated.js";
import { segmentsLength } from "../src/sim/workload/tokens.js";
import { TraceError } from "../src/sim/workload/trace/format.js";
import { readTrace, readTraceFile } from "../src/sim/workload/trace/read.js";
import { writeTrace, writeTraceFile } from "../src/sim/workload/trace/write.js";

const dir = mkdtempSync(join(tmpdir(), "kvctl-sim-trace-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const small = (o: Partial<Parameters<typeof generateWorkload>[0]> = {}) =>
  generateWorkload({
    seed: 5,
    programs: 12,
    tenants: 2,
    context: 4096,
    gaps: "seconds",
    flood: true,
    floodRequests: 6,
    ...o,
  });

/** A workload whose segments carry real ids, as a recorded run's do. */
function withIds(): SimWorkload {
  const sys = { seed: 1, len: 5, ids: [10, 11, 12, 13, 14] };
  const sysShort = { seed: 1, len: 3, ids: [10, 11, 12] };
  const a1 = { seed: 2, len: 3, ids: [7, 7, 7] };
  const ans = { seed: 3, len: 2, ids: [99, 98] };
  const req = (prompt: (typeof sys)[], gapS: number, kind: "start" | "tool" | "human") => ({
    prompt,
    output: [ans],
    reasoningTokens: 1,
    gapS,
    gapKind: kind,
  });
  return {
    name: "ids",
    vocab: 100,
    meta: { source: "test" },
    programs: [
      {
        id: "s1",
        tenant: "bench",
        family: "bfcl",
        startS: 0.25,
        requests: [req([sysShort], 0, "start"), req([sys, a1], 1.5, "tool")],
      },
      { id: "s2", tenant: "bench", family: "bfcl", startS: 2, requests: [req([sys], 0, "start")] },
    ],
  };
}

describe("sim trace format: round trip", () => {
  it("reads back a generated workload exactly, and writes the same bytes again", () => {
    const w = small();
    const text = writeTrace(w, { blockSize: 16 });
    const back = readTrace(text);
    expect(back).toEqual(w);
    expect(writeTrace(back, { blockSize: 16 })).toBe(text);
    const path = join(dir, "gen.jsonl");
    writeTraceFile(path, w, { blockSize: 16 });
    expect(readFileSync(path, "utf8")).toBe(text);
    expect(readTraceFile(path)).toEqual(w);
  });

  it("writes real ids once per seed, where the file first needs them", () => {
    const w = withIds();
    const text = writeTrace(w, { blockSize: 2 });
    const rows = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(rows[0].kvctl.prompt).toEqual([[1, 3, [10, 11, 12]]]);
    expect(rows[0].kvctl.output).toEqual([[3, 2, [99, 98]]]);
    // The system segment grows to 5 ids in the second request: written again, whole.
    expect(rows[1].kvctl.prompt).toEqual([
      [1, 5, [10, 11, 12, 13, 14]],
      [2, 3, [7, 7, 7]],
    ]);
    expect(rows[1].kvctl.output).toEqual([[3, 2]]);
    expect(rows[2].kvctl.prompt).toEqual([[1, 5]]);
    expect(readTrace(text)).toEqual(w);
    expect(writeTrace(readTrace(text), { blockSize: 2 })).toBe(text);
  });

  it("names equal blocks after equal prefixes with equal hash ids, numbered from 0", () => {
    const rows = writeTrace(withIds(), { blockSize: 2 })
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    // [10,11][12] / [10,11][12,13][14,7][7,7] / [10,11][12,13][14]
    expect(rows.map((r) => r.hash_ids)).toEqual([
      [0, 1],
      [0, 2, 3, 4],
      [0, 2, 5],
    ]);
    expect(rows.map((r) => r.input_length)).toEqual([3, 8, 5]);
  });

  it("refuses to write a workload whose seed names two contents, leaving no file", () => {
    const w = withIds();
    w.programs[1].requests[0].prompt = [{ seed: 1, len: 5, ids: [10, 11, 12, 13, 15] }];
    expect(() => writeTrace(w)).toThrow(/seed 1 names two different id sequences/);
    const path = join(dir, "bad.jsonl");
    expect(() => writeTraceFile(path, w)).toThrow(/seed 1/);
    expect(existsSync(path)).toBe(false);
    expect(existsSync(`${path}.tmp-${process.pid}`)).toBe(false);
  });
});

interface DynamoRequest {
  session_id: string | null;
  turn_index: number;
  arrival_time_ms: number;
  terminal_time_ms: number;
  input_length: number;
  output_length: number;
  reused_input_tokens: number;
}

function dynamoReplay(path: string, blockSize: number): DynamoRequest[] {
  const r = spawnSync(
    venvPython,
    [join(packageRoot, "test", "helpers", "dynamo_replay.py"), dynamoSite, path, String(blockSize)],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`dynamo replay failed: ${r.stderr.slice(-2000)}`);
  return r.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as DynamoRequest);
}

describe("sim trace format: NVIDIA Dynamo 1.6.1 reads the same files", () => {
  it("replays a file we wrote: same sessions, lengths and gaps, and the prefixes it shares", () => {
    const w = small({ programs: 6, context: 8192 });
    const path = join(dir, "for-dynamo.jsonl");
    writeFileSync(path, writeTrace(w, { blockSize: 16 }));
    const got = dynamoReplay(path, 16);
    const bySession = new Map<string, DynamoRequest[]>();
    for (const r of got) bySession.set(r.session_id!, [...(bySession.get(r.session_id!) ?? []), r]);
    expect(got.length).toBe(w.programs.reduce((n, p) => n + p.requests.length, 0));
    // Dynamo's clock starts at the earliest timestamp.
    const t0 = Math.min(...w.programs.map((p) => p.startS));
    for (const p of w.programs) {
      const rs = (bySession.get(p.id) ?? []).sort((a, b) => a.turn_index - b.turn_index);
      expect(rs.map((r) => [r.input_length, r.output_length])).toEqual(
        p.requests.map((r) => [segmentsLength(r.prompt), segmentsLength(r.output)]),
      );
      expect(rs[0].arrival_time_ms).toBeCloseTo((p.startS - t0) * 1000, 3);
      for (let k = 1; k < rs.length; k++)
        expect(rs[k].arrival_time_ms - rs[k - 1].terminal_time_ms).toBeCloseTo(
          p.requests[k].gapS * 1000,
          3,
        );
    }
    // A later turn of a session reuses its earlier prompt's blocks from Dynamo's own prefix cache.
    const later = got.filter((r) => r.turn_index > 0);
    expect(later.length).toBeGreaterThan(5);
    expect(later.every((r) => r.reused_input_tokens >= 16)).toBe(true);
  });

  it("reads Dynamo's own Mooncake fixtures as Dynamo does", () => {
    const fixtures = join(dynamoSite, "dynamo", "replay", "tests");
    for (const [file, bs] of [
      ["data/mooncake_tiny.jsonl", 512],
      ["e2e/configs/unified_cli/fixtures/traces/mooncake.jsonl", 512],
    ] as const) {
      const path = join(fixtures, file);
      const w = readTraceFile(path, { blockSize: bs });
      const got = dynamoReplay(path, bs);
      const ours = w.programs.flatMap((p) =>
        p.requests.map((r) => [
          p.startS * 1000,
          segmentsLength(r.prompt),
          segmentsLength(r.output),
        ]),
      );
      const theirs = got.map((r) => [r.arrival_time_ms, r.input_length, r.output_length]);
      const key = (x: number[]) => x.join(",");
      expect(ours.map(key).sort()).toEqual(theirs.map(key).sort());
    }
  });

  it("reads sessions' starts and later rows (delay, delay_ms, timestamp) as Dynamo does", () => {
    const path = join(dir, "sessions.jsonl");
    const rows = [
      { session_id: "b", timestamp: 1050, input_length: 20, output_length: 4, hash_ids: [7, 8] },
      { session_id: "a", timestamp: 1000, input_length: 20, output_length: 4, hash_ids: [1, 2] },
      { session_id: "a", timestamp: 4000, input_length: 40, output_length: 4, hash_ids: [1, 2, 3] },
      { session_id: "b", delay_ms: 100, input_length: 20, output_length: 4, hash_ids: [7, 8] },
      { session_id: "a", delay: 10.5, input_length: 40, output_length: 4, hash_ids: [1, 2, 3] },
    ];
    writeFileSync(path, rows.map((r) => JSON.stringify(r)).join("\n"));
    const w = readTraceFile(path, { blockSize: 16 });
    const r9 = (x: number) => Math.round(x * 1e9) / 1e9;
    expect(w.programs.map((p) => [p.id, r9(p.startS), p.requests.map((r) => r9(r.gapS))])).toEqual([
      ["b", 0.05, [0, 0.1]],
      ["a", 0, [0, 3, 0.0105]],
    ]);
    const got = dynamoReplay(path, 16);
    for (const p of w.programs) {
      const rs = got
        .filter((r) => r.session_id === p.id)
        .sort((x, y) => x.turn_index - y.turn_index);
      for (let k = 1; k < rs.length; k++)
        expect(rs[k].arrival_time_ms - rs[k - 1].terminal_time_ms).toBeCloseTo(
          p.requests[k].gapS * 1000,
          6,
        );
    }
  });
});

describe("sim trace format: a malformed line is refused by line and field", () => {
  const text = writeTrace(small({ programs: 3, floodRequests: 2 }), { blockSize: 16 });
  const lines = text.trim().split("\n");
  /** The file with line `n` (from 1) changed by `edit`. */
  const edited = (n: number, edit: (row: any) => void) =>
    lines
      .map((l, i) => {
        if (i !== n - 1) return l;
        const row = JSON.parse(l);
        edit(row);
        return JSON.stringify(row);
      })
      .join("\n");
  // The first row of a session that has later rows, and one of those later rows.
  const rows = lines.map((l) => JSON.parse(l));
  const later = rows.findIndex((r, i) => i > 0 && r.delay !== undefined) + 1;
  const expectRefused = (t: string, line: number, field: string, o = {}) => {
    let err: unknown;
    try {
      readTrace(t, o);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TraceError);
    expect({ line: (err as TraceError).line, field: (err as TraceError).field }).toEqual({
      line,
      field,
    });
  };

  it("refuses each kind of bad kvctl row, naming it", () => {
    expect(later).toBeGreaterThan(1);
    const cases: [number, (r: any) => void, string][] = [
      [2, (r) => (r.input_length += 1), "input_length"],
      [2, (r) => (r.output_length = -1), "output_length"],
      [2, (r) => (r.hash_ids[0] = r.hash_ids[0] + 1000), "hash_ids[0]"],
      [2, (r) => r.hash_ids.pop(), "hash_ids"],
      [1, (r) => (r.timestamp += 5), "timestamp"],
      [later, (r) => (r.delay += 5), "delay"],
      [later, (r) => (r.timestamp = 0), "timestamp"],
      [2, (r) => (r.kvctl.gap_kind = "nap"), "kvctl.gap_kind"],
      [2, (r) => (r.kvctl.gap_s = -1), "kvctl.gap_s"],
      [2, (r) => (r.kvctl.prompt[0][1] = 0), "kvctl.prompt[0][1]"],
      [2, (r) => (r.kvctl.prompt[0] = [1]), "kvctl.prompt[0]"],
      [2, (r) => (r.kvctl.prompt = []), "kvctl.prompt"],
      [2, (r) => (r.kvctl.reasoning_tokens = 1e9), "kvctl.reasoning_tokens"],
      [2, (r) => (r.kvctl.cache_marker = { tokens: 1, ttl: 3 }), "kvctl.cache_marker.ttl"],
      [2, (r) => (r.kvctl.rewrite = false), "kvctl.rewrite"],
      [2, (r) => (r.kvctl.colour = "red"), "kvctl.colour"],
      [2, (r) => (r.hash_id = []), "hash_id"],
      [2, (r) => (r.kvctl.workload = { name: "w" }), "kvctl.workload"],
      [later, (r) => (r.kvctl.tenant = "t9"), "kvctl.tenant"],
      [1, (r) => delete r.kvctl.family, "kvctl.family"],
      [1, (r) => (r.kvctl.workload.vocab = 1), "kvctl.workload.vocab"],
      [1, (r) => (r.kvctl.workload.meta.x = [1]), "kvctl.workload.meta.x"],
      [2, (r) => delete r.kvctl, "kvctl"],
      [2, (r) => (r.session_id = ""), "session_id"],
    ];
    for (const [line, edit, field] of cases) expectRefused(edited(line, edit), line, field);
    expectRefused(`${lines[0]}\n{nope\n`, 2, "json");
    expectRefused(`${lines[0]}\n[1]\n`, 2, "json");
    expectRefused(`{"schema":"dynamo.agentic_mooncake","version":2}\n${lines[0]}`, 1, "schema");
    expectRefused("\n\n", 1, "rows");
  });

  it("refuses bad ids: out of the vocabulary, a seed with two contents, a reference past its ids", () => {
    const t = writeTrace(withIds(), { blockSize: 2 }).trim().split("\n");
    const edit = (n: number, f: (r: any) => void) =>
      t.map((l, i) => (i === n - 1 ? JSON.stringify((f((r = JSON.parse(l))), r)) : l)).join("\n");
    let r: any;
    expectRefused(
      edit(1, (x) => (x.kvctl.prompt[0][2][1] = 100)),
      1,
      "kvctl.prompt[0][2][1]",
    );
    expectRefused(
      edit(2, (x) => (x.kvctl.prompt[0][2][0] = 1)),
      2,
      "kvctl.prompt[0][2][0]",
    );
    expectRefused(
      edit(2, (x) => (x.kvctl.prompt[0] = [1, 5])),
      2,
      "kvctl.prompt[0]",
    );
    expectRefused(
      edit(2, (x) => (x.kvctl.prompt[1] = [3, 3])),
      2,
      "kvctl.prompt[1]",
    );
    expectRefused(
      edit(1, (x) => (x.kvctl.prompt[0][2] = [1, 2])),
      1,
      "kvctl.prompt[0][2]",
    );
  });

  it("refuses bad Mooncake rows, naming them, and needs the block size", () => {
    const ok = {
      session_id: "a",
      timestamp: 0,
      input_length: 20,
      output_length: 4,
      hash_ids: [1, 2],
    };
    const two = (second: object) =>
      `${JSON.stringify(ok)}\n${JSON.stringify({ ...ok, ...second })}`;
    const o = { blockSize: 16 };
    expect(() => readTrace(JSON.stringify(ok))).toThrow(/^blockSize:/);
    expectRefused(JSON.stringify({ ...ok, input_length: 33 }), 1, "input_length", o);
    expectRefused(JSON.stringify({ ...ok, input_length: 16 }), 1, "input_length", o);
    expectRefused(JSON.stringify({ ...ok, hash_ids: [] }), 1, "hash_ids", o);
    expectRefused(JSON.stringify({ ...ok, hash_ids: [1, 2 ** 53] }), 1, "hash_ids[1]", o);
    expectRefused(JSON.stringify({ ...ok, output_length: 1.5 }), 1, "output_length", o);
    expectRefused(JSON.stringify({ ...ok, timestamp: undefined }), 1, "timestamp", o);
    expectRefused(JSON.stringify({ ...ok, delay: 5 }), 1, "delay", o);
    expectRefused(JSON.stringify({ ...ok, created_time: 5 }), 1, "created_time", o);
    expectRefused(JSON.stringify({ ...ok, tool_wait_ms: 5 }), 1, "tool_wait_ms", o);
    expectRefused(JSON.stringify({ ...ok, kvctl: { gap_s: 1 } }), 1, "kvctl", o);
    expectRefused(two({ timestamp: undefined, delay: 5, delay_ms: 5 }), 2, "delay", o);
    expectRefused(two({ timestamp: undefined }), 2, "delay", o);
    expectRefused(two({ timestamp: -1 }), 2, "timestamp", o);
    expect(readTrace(two({ timestamp: undefined, delay: 5 }), o).programs[0].requests[1].gapS).toBe(
      0.005,
    );
  });
});
