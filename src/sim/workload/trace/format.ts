// kvctl's JSONL trace format (docs/sim.md, "Trace format"): one request per line, a Mooncake row
// as NVIDIA Dynamo 1.6.1's replay reads it (`session_id`, `timestamp` or `delay` in ms,
// `input_length`, `output_length`, `hash_ids`), plus a `kvctl` object with what Mooncake cannot
// say (tenant, gap kind, tool, reasoning, cache marker, compaction, the segments and real ids).

/** The top-level fields of a Mooncake row that this reader knows. */
export const MOONCAKE_FIELDS = [
  "session_id",
  "timestamp",
  "delay",
  "delay_ms",
  "input_length",
  "output_length",
  "hash_ids",
  "request_id",
  "model",
  "kvctl",
] as const;

/** The fields of a row's `kvctl` object. */
export const KVCTL_FIELDS = [
  "workload",
  "tenant",
  "family",
  "start_s",
  "gap_kind",
  "gap_s",
  "tool",
  "prompt",
  "output",
  "reasoning_tokens",
  "cache_marker",
  "rewrite",
] as const;

/** The first line's `kvctl.workload`: what the whole file is. */
export interface TraceWorkloadHeader {
  name: string;
  vocab: number;
  block_size: number;
  meta: Record<string, string | number | boolean>;
}

/** A segment as written: `[seed, len]`, or `[seed, len, ids]` where the file first gives its ids. */
export type SegmentJson = [number, number] | [number, number, number[]];

export interface KvctlRowJson {
  workload?: TraceWorkloadHeader;
  tenant?: string;
  family?: string;
  start_s?: number;
  gap_kind: "start" | "tool" | "human";
  gap_s: number;
  tool?: string;
  prompt: SegmentJson[];
  output: SegmentJson[];
  reasoning_tokens: number;
  cache_marker?: { tokens: number; ttl_s: number };
  rewrite?: true;
}

/** A refused trace: the line (from 1) and the field that is wrong, and why. */
export class TraceError extends Error {
  constructor(
    readonly line: number,
    readonly field: string,
    why: string,
  ) {
    super(`trace line ${line}: ${field}: ${why}`);
    this.name = "TraceError";
  }
}

/** Seeds of the outputs of plain Mooncake rows (which name no output content): above every block seed. */
export const OUTPUT_SEED_BASE = 2 ** 52;
