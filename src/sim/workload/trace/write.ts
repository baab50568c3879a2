// Writes a workload as kvctl's JSONL trace: each program's requests in order, one line each, the
// Mooncake fields derived from the kvctl ones (so NVIDIA Dynamo's replay reads the same file with
// `--trace-block-size` set to the block size written on the first line).
import { closeSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import type { Segment, SimProgram, SimRequestSpec, SimWorkload } from "../../types.js";
import { checkSegment, segmentsLength } from "../tokens.js";
import { BlockIds } from "./block-ids.js";
import type { KvctlRowJson, SegmentJson } from "./format.js";

export interface WriteTraceOptions {
  /** Tokens per Mooncake hash id (default 64). */
  blockSize?: number;
}

export const DEFAULT_TRACE_BLOCK_SIZE = 64;

/** Real ids are written once per seed, where the file first needs them; the rest refer back. */
class IdsLedger {
  private readonly ids = new Map<number, readonly number[]>();
  private readonly plain = new Set<number>();

  json(s: Segment, vocab: number, where: string): SegmentJson {
    checkSegment(s, vocab);
    if (s.ids === undefined) {
      if (this.ids.has(s.seed)) throw new RangeError(`${where}: seed ${s.seed} has ids elsewhere`);
      this.plain.add(s.seed);
      return [s.seed, s.len];
    }
    if (this.plain.has(s.seed))
      throw new RangeError(`${where}: seed ${s.seed} has no ids elsewhere`);
    const known = this.ids.get(s.seed) ?? [];
    const overlap = Math.min(known.length, s.len);
    for (let j = 0; j < overlap; j++)
      if (known[j] !== s.ids[j])
        throw new RangeError(`${where}: seed ${s.seed} names two different id sequences`);
    if (s.len <= known.length) return [s.seed, s.len];
    this.ids.set(s.seed, s.ids);
    return [s.seed, s.len, [...s.ids]];
  }
}

function kvctlRow(
  p: SimProgram,
  r: SimRequestSpec,
  i: number,
  segs: (list: readonly Segment[], where: string) => SegmentJson[],
): KvctlRowJson {
  return {
    ...(i === 0 ? { tenant: p.tenant, family: p.family, start_s: p.startS } : {}),
    gap_kind: r.gapKind,
    gap_s: r.gapS,
    ...(r.tool !== undefined ? { tool: r.tool } : {}),
    prompt: segs(r.prompt, "prompt"),
    output: segs(r.output, "output"),
    reasoning_tokens: r.reasoningTokens,
    ...(r.cacheMarker
      ? { cache_marker: { tokens: r.cacheMarker.tokens, ttl_s: r.cacheMarker.ttlS } }
      : {}),
    ...(r.rewrite ? { rewrite: true as const } : {}),
  };
}

/** The trace's lines, one request each (no newline), in the workload's program order. */
export function* traceLines(w: SimWorkload, o: WriteTraceOptions = {}): Generator<string> {
  const blockSize = o.blockSize ?? DEFAULT_TRACE_BLOCK_SIZE;
  if (!Number.isInteger(blockSize) || blockSize < 1)
    throw new RangeError(`blockSize: expected an integer >= 1, got ${blockSize}`);
  const blocks = new BlockIds(blockSize);
  const ledger = new IdsLedger();
  let first = true;
  for (const p of w.programs) {
    if (p.requests.length === 0) throw new RangeError(`program ${p.id}: no requests to write`);
    let prev: { segs: readonly Segment[]; ids: readonly number[] } | undefined;
    for (const [i, r] of p.requests.entries()) {
      const where = `program ${p.id} request ${i}`;
      const segs = (list: readonly Segment[], field: string) =>
        list.map((s, k) => ledger.json(s, w.vocab, `${where} ${field}[${k}]`));
      const kvctl = kvctlRow(p, r, i, segs);
      const hashIds = blocks.of(r.prompt, prev);
      prev = { segs: r.prompt, ids: hashIds };
      const header = first
        ? { workload: { name: w.name, vocab: w.vocab, block_size: blockSize, meta: w.meta } }
        : {};
      first = false;
      yield JSON.stringify({
        session_id: p.id,
        ...(i === 0 ? { timestamp: p.startS * 1000 } : { delay: r.gapS * 1000 }),
        input_length: segmentsLength(r.prompt),
        output_length: segmentsLength(r.output),
        hash_ids: hashIds,
        kvctl: { ...header, ...kvctl },
      });
    }
  }
}

/** The whole trace as one string (small workloads; see writeTraceFile for large ones). */
export function writeTrace(w: SimWorkload, o: WriteTraceOptions = {}): string {
  let out = "";
  for (const line of traceLines(w, o)) out += `${line}\n`;
  return out;
}

/**
 * Writes the trace to a file in chunks (a fleet-scale workload is hundreds of MB), through a
 * temporary file renamed into place at the end: a workload refused halfway leaves no file.
 */
export function writeTraceFile(path: string, w: SimWorkload, o: WriteTraceOptions = {}): void {
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, "w");
  try {
    let chunk = "";
    for (const line of traceLines(w, o)) {
      chunk += `${line}\n`;
      if (chunk.length >= 1 << 20) {
        writeSync(fd, chunk);
        chunk = "";
      }
    }
    writeSync(fd, chunk);
    closeSync(fd);
    renameSync(tmp, path);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw e;
  }
}
