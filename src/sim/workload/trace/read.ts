// Reads a JSONL trace into a workload: kvctl's own format (its first row carries
// `kvctl.workload`) or a plain Mooncake trace as NVIDIA Dynamo's replay reads it. The whole file
// is checked before anything is returned: a bad line is refused with its line number and field,
// and nothing of the file is used.
import { readFileSync } from "node:fs";
import type { GapKind, Segment, SimProgram, SimRequestSpec, SimWorkload } from "../../types.js";
import { MAX_VOCAB } from "../tokens.js";
import { BlockIds } from "./block-ids.js";
import { Fields, IdMatch, isObject, type Json } from "./check.js";
import { MOONCAKE_FIELDS, TraceError } from "./format.js";
import { type ProgramHead, readHeader, readKvctlRow, SegmentReader } from "./read-kvctl.js";
import { readMooncakeRow } from "./read-mooncake.js";

export interface ReadTraceOptions {
  /** A plain Mooncake file: tokens per hash id (what Dynamo takes as `--trace-block-size`). */
  blockSize?: number;
  /** A plain Mooncake file: the vocabulary its tokens are drawn below (default 128256). */
  vocab?: number;
  /** A plain Mooncake file: the kind of a session's later gaps (default "human"). */
  gapKind?: "tool" | "human";
  /** A plain Mooncake file: the workload's name (default "mooncake"). */
  name?: string;
}

interface Row {
  line: number;
  json: Json;
}

function rowsOf(text: string): Row[] {
  const rows: Row[] = [];
  text.split("\n").forEach((raw, i) => {
    const t = raw.trim();
    if (t === "") return;
    const f: Fields = new Fields(i + 1);
    let v: unknown;
    try {
      v = JSON.parse(t);
    } catch (e) {
      f.fail("json", (e as Error).message);
    }
    if (!isObject(v)) f.fail("json", "a row is a JSON object");
    if ("schema" in v)
      f.fail(
        "schema",
        "a Dynamo header line (agentic or request trace): kvctl reads Mooncake rows",
      );
    f.only(v, MOONCAKE_FIELDS);
    rows.push({ line: i + 1, json: v });
  });
  if (rows.length === 0) throw new TraceError(1, "rows", "the file has no rows");
  return rows;
}

/** A program as its rows arrive (rows of several sessions may interleave). */
interface Draft {
  head: ProgramHead;
  requests: SimRequestSpec[];
  prev?: { segs: readonly Segment[]; ids: readonly number[]; file: readonly unknown[] };
  prevTimestamp?: number;
}

function sessionOf(f: Fields, row: Json, line: number): string {
  return row.session_id === undefined ? `line${line}` : f.str("session_id", row.session_id);
}

function programs(drafts: Map<string, Draft>): SimProgram[] {
  return [...drafts].map(([id, d]) => ({
    id,
    tenant: d.head.tenant,
    family: d.head.family,
    startS: d.head.startS,
    requests: d.requests,
  }));
}

function readKvctl(rows: Row[]): SimWorkload {
  const first: Fields = new Fields(rows[0].line);
  const header = readHeader(first, (rows[0].json.kvctl as Json).workload);
  const segments = new SegmentReader(header.vocab);
  const blocks = new BlockIds(header.block_size);
  const ids = new IdMatch();
  const drafts = new Map<string, Draft>();
  rows.forEach(({ line, json }, i) => {
    const f: Fields = new Fields(line);
    const session = sessionOf(f, json, line);
    const d = drafts.get(session);
    const ctx = { segments, blocks, ids, prev: d?.prev, firstOfSession: !d, firstOfFile: i === 0 };
    const { head, request, hashIds, fileIds } = readKvctlRow(f, json, ctx);
    const draft = d ?? { head: head as ProgramHead, requests: [] };
    draft.requests.push(request);
    draft.prev = { segs: request.prompt, ids: hashIds, file: fileIds };
    drafts.set(session, draft);
  });
  return { name: header.name, vocab: header.vocab, programs: programs(drafts), meta: header.meta };
}

function readMooncake(rows: Row[], o: ReadTraceOptions): SimWorkload {
  const blockSize = o.blockSize;
  if (blockSize === undefined || !Number.isSafeInteger(blockSize) || blockSize < 1)
    throw new RangeError(
      `blockSize: a Mooncake trace needs the block size its hash_ids were made with (Dynamo's --trace-block-size), got ${blockSize}`,
    );
  const vocab = o.vocab ?? 128256;
  if (!Number.isSafeInteger(vocab) || vocab < 2 || vocab > MAX_VOCAB)
    throw new RangeError(`vocab: expected an integer in [2, ${MAX_VOCAB}], got ${vocab}`);
  const gapKind: GapKind = o.gapKind ?? "human";
  const drafts = new Map<string, Draft>();
  rows.forEach(({ line, json }, index) => {
    const f: Fields = new Fields(line);
    const session = sessionOf(f, json, line);
    const d = drafts.get(session);
    const c = { blockSize, gapKind, index, firstOfSession: !d, prevTimestamp: d?.prevTimestamp };
    const { request, startS, at } = readMooncakeRow(f, json, c);
    const head = { tenant: "default", family: "trace", startS: startS ?? 0 };
    const draft = d ?? { head, requests: [] };
    draft.requests.push(request);
    draft.prevTimestamp = at;
    drafts.set(session, draft);
  });
  // Dynamo's replay starts the clock at the earliest timestamp; so does this reader.
  const t0 = Math.min(...[...drafts.values()].map((d) => d.head.startS));
  for (const d of drafts.values()) d.head.startS -= t0;
  return {
    name: o.name ?? "mooncake",
    vocab,
    programs: programs(drafts),
    meta: { format: "mooncake", block_size: blockSize, vocab, gap_kind: gapKind },
  };
}

/** A workload from a trace's text (see docs/sim.md, "Trace format"). */
export function readTrace(text: string, o: ReadTraceOptions = {}): SimWorkload {
  const rows = rowsOf(text);
  const kv = rows[0].json.kvctl;
  return isObject(kv) && "workload" in kv ? readKvctl(rows) : readMooncake(rows, o);
}

export function readTraceFile(path: string, o: ReadTraceOptions = {}): SimWorkload {
  return readTrace(readFileSync(path, "utf8"), o);
}
