// One row of a kvctl trace (its first row carries `kvctl.workload`): the request as the `kvctl`
// object states it, checked against the row's Mooncake fields, which must render the same request.
import type { GapKind, Segment, SimRequestSpec } from "../../types.js";
import { MAX_VOCAB } from "../tokens.js";
import type { BlockIds } from "./block-ids.js";
import { type Fields, type IdMatch, type Json, isObject } from "./check.js";
import { KVCTL_FIELDS, type TraceWorkloadHeader } from "./format.js";

const GAP_KINDS: readonly GapKind[] = ["start", "tool", "human"];

/** Segments of a file: real ids are given once per seed and referred to afterwards. */
export class SegmentReader {
  private readonly ids = new Map<number, number[]>();
  private readonly plain = new Set<number>();

  constructor(private readonly vocab: number) {}

  read(f: Fields, field: string, v: unknown): Segment {
    const a = f.arr(field, v);
    if (a.length !== 2 && a.length !== 3) f.fail(field, "expected [seed, len] or [seed, len, ids]");
    const seed = f.int(`${field}[0]`, a[0], 0);
    const len = f.int(`${field}[1]`, a[1], 1);
    const known = this.ids.get(seed);
    if (a.length === 2) {
      if (known === undefined) {
        this.plain.add(seed);
        return { seed, len };
      }
      if (len > known.length)
        f.fail(
          field,
          `seed ${seed} has ids for ${known.length} tokens in the file so far, not ${len}`,
        );
      return { seed, len, ids: len === known.length ? known : known.slice(0, len) };
    }
    if (this.plain.has(seed)) f.fail(field, `seed ${seed} appeared without ids before`);
    const ids = f.arr(`${field}[2]`, a[2]);
    if (ids.length !== len) f.fail(`${field}[2]`, `${ids.length} ids for len ${len}`);
    ids.forEach((id, j) => {
      f.int(`${field}[2][${j}]`, id, 0, this.vocab - 1);
      if (known && j < known.length && known[j] !== id)
        f.fail(`${field}[2][${j}]`, `seed ${seed} had id ${known[j]} here before`);
    });
    if (known && len <= known.length) return { seed, len, ids: known.slice(0, len) };
    this.ids.set(seed, ids as number[]);
    return { seed, len, ids: ids as number[] };
  }
}

export function readHeader(f: Fields, v: unknown): TraceWorkloadHeader {
  const h = f.obj("kvctl.workload", v);
  f.only(h, ["name", "vocab", "block_size", "meta"], "kvctl.workload.");
  const meta = f.obj("kvctl.workload.meta", h.meta);
  for (const [k, x] of Object.entries(meta))
    if (!["string", "number", "boolean"].includes(typeof x))
      f.fail(`kvctl.workload.meta.${k}`, "expected a string, number or boolean");
  return {
    name: f.str("kvctl.workload.name", h.name),
    vocab: f.int("kvctl.workload.vocab", h.vocab, 2, MAX_VOCAB),
    block_size: f.int("kvctl.workload.block_size", h.block_size, 1),
    meta: meta as TraceWorkloadHeader["meta"],
  };
}

/** What the first row of a session says of its program. */
export interface ProgramHead {
  tenant: string;
  family: string;
  startS: number;
}

function readHead(f: Fields, kv: Json, first: boolean): ProgramHead | null {
  if (!first) {
    for (const k of ["tenant", "family", "start_s"])
      if (k in kv) f.fail(`kvctl.${k}`, "only a session's first row names its program");
    return null;
  }
  return {
    tenant: f.str("kvctl.tenant", kv.tenant),
    family: f.str("kvctl.family", kv.family),
    startS: f.num("kvctl.start_s", kv.start_s, 0),
  };
}

function readMarker(f: Fields, v: unknown, promptLen: number): SimRequestSpec["cacheMarker"] {
  if (v === undefined) return undefined;
  const m = f.obj("kvctl.cache_marker", v);
  f.only(m, ["tokens", "ttl_s"], "kvctl.cache_marker.");
  return {
    tokens: f.int("kvctl.cache_marker.tokens", m.tokens, 0, promptLen),
    ttlS: f.num("kvctl.cache_marker.ttl_s", m.ttl_s, 0),
  };
}

export interface RowContext {
  segments: SegmentReader;
  blocks: BlockIds;
  ids: IdMatch;
  /** The session's previous prompt, its recomputed hash ids and the file's. */
  prev?: { segs: readonly Segment[]; ids: readonly number[]; file: readonly unknown[] };
  firstOfSession: boolean;
  firstOfFile: boolean;
}

export function readKvctlRow(
  f: Fields,
  row: Json,
  ctx: RowContext,
): { head: ProgramHead | null; request: SimRequestSpec; hashIds: number[]; fileIds: unknown[] } {
  if (!isObject(row.kvctl)) f.fail("kvctl", "every row of a kvctl trace has a kvctl object");
  const kv = row.kvctl;
  f.only(kv, KVCTL_FIELDS, "kvctl.");
  if (!ctx.firstOfFile && "workload" in kv) f.fail("kvctl.workload", "only the first row has it");
  const head = readHead(f, kv, ctx.firstOfSession);
  const gapKind = kv.gap_kind as GapKind;
  if (!GAP_KINDS.includes(gapKind))
    f.fail("kvctl.gap_kind", `expected one of ${GAP_KINDS.join(", ")}`);
  const segs = (field: string) =>
    f
      .arr(`kvctl.${field}`, kv[field])
      .map((s, k) => ctx.segments.read(f, `kvctl.${field}[${k}]`, s));
  const prompt = segs("prompt");
  if (prompt.length === 0) f.fail("kvctl.prompt", "a request has a prompt");
  const output = segs("output");
  const promptLen = prompt.reduce((n, s) => n + s.len, 0);
  const outputLen = output.reduce((n, s) => n + s.len, 0);
  if (kv.rewrite !== undefined && kv.rewrite !== true)
    f.fail("kvctl.rewrite", "expected true or no field");
  const request: SimRequestSpec = {
    prompt,
    output,
    reasoningTokens: f.int("kvctl.reasoning_tokens", kv.reasoning_tokens, 0, outputLen),
    gapS: f.num("kvctl.gap_s", kv.gap_s, 0),
    gapKind,
    ...(kv.tool !== undefined ? { tool: f.str("kvctl.tool", kv.tool) } : {}),
    ...(kv.cache_marker !== undefined
      ? { cacheMarker: readMarker(f, kv.cache_marker, promptLen) }
      : {}),
    ...(kv.rewrite ? { rewrite: true } : {}),
  };
  f.same("input_length", f.int("input_length", row.input_length, 1), promptLen, "kvctl.prompt");
  f.same("output_length", f.int("output_length", row.output_length, 0), outputLen, "kvctl.output");
  checkTiming(f, row, head, request);
  const hashIds = ctx.blocks.of(prompt, ctx.prev);
  const fileIds = f.arr("hash_ids", row.hash_ids);
  const prev = ctx.prev ? { file: ctx.prev.file, mine: ctx.prev.ids } : undefined;
  ctx.ids.check(f, fileIds, hashIds, prev);
  return { head, request, hashIds, fileIds };
}

/** The Mooncake timing fields render the kvctl ones: a session's start, then each gap (ms). */
function checkTiming(f: Fields, row: Json, head: ProgramHead | null, r: SimRequestSpec): void {
  if (head) {
    if (row.delay !== undefined || row.delay_ms !== undefined)
      f.fail("delay", "a session's first row gives its timestamp");
    f.same("timestamp", f.num("timestamp", row.timestamp, 0), head.startS * 1000, "kvctl.start_s");
    return;
  }
  if (row.timestamp !== undefined) f.fail("timestamp", "a session's later rows give their delay");
  const field = row.delay_ms !== undefined ? "delay_ms" : "delay";
  if (row.delay !== undefined && row.delay_ms !== undefined)
    f.fail("delay_ms", "give delay or delay_ms, not both");
  f.same(field, f.num(field, row[field], 0), r.gapS * 1000, "kvctl.gap_s");
}
