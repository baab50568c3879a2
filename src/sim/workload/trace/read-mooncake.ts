// One row of a plain Mooncake trace, read as NVIDIA Dynamo 1.6.1's replay reads it: the prompt is
// its hash ids' blocks (each id one segment of `blockSize` tokens, the last one `input_length`'s
// remainder), the output fresh tokens; rows of one `session_id` form a closed-loop program whose
// later rows wait `delay` / `delay_ms` after the previous answer, or the difference of their
// `timestamp`s (checked against Dynamo's replay in test/sim-workload-trace.test.ts).
import type { GapKind, Segment, SimRequestSpec } from "../../types.js";
import type { Fields, Json } from "./check.js";
import { OUTPUT_SEED_BASE } from "./format.js";

export interface MooncakeRowContext {
  blockSize: number;
  /** The kind given to a session's later gaps (a Mooncake row does not say). */
  gapKind: GapKind;
  /** Index of the row in the file (its output's seed). */
  index: number;
  firstOfSession: boolean;
  /** The session's previous row's timestamp (ms), when it had one. */
  prevTimestamp?: number;
}

function prompt(f: Fields, row: Json, blockSize: number): Segment[] {
  const ids = f.arr("hash_ids", row.hash_ids);
  if (ids.length === 0) f.fail("hash_ids", "a prompt has at least one block");
  // JSON numbers above 2^53 lose their low bits: such ids could merge distinct blocks.
  const seeds = ids.map((h, k) => f.int(`hash_ids[${k}]`, h, 0, OUTPUT_SEED_BASE - 1));
  const full = seeds.length * blockSize;
  const len =
    row.input_length === undefined
      ? full
      : f.int("input_length", row.input_length, (seeds.length - 1) * blockSize + 1, full);
  return seeds.map((seed, k) => ({
    seed,
    len: k < seeds.length - 1 ? blockSize : len - (seeds.length - 1) * blockSize,
  }));
}

/** The request's gap before it (s), and the row's timestamp (ms) when it gave one. */
function timing(f: Fields, row: Json, c: MooncakeRowContext): { gapS: number; at?: number } {
  if (c.firstOfSession) {
    for (const k of ["delay", "delay_ms"])
      if (row[k] !== undefined) f.fail(k, "a session's first row gives its timestamp");
    return { gapS: 0, at: f.num("timestamp", row.timestamp, 0) };
  }
  const given = ["delay", "delay_ms", "timestamp"].filter((k) => row[k] !== undefined);
  if (given.length !== 1)
    f.fail(
      "delay",
      `a session's later row gives one of delay, delay_ms or timestamp, not ${given.length}`,
    );
  const k = given[0];
  if (k !== "timestamp") return { gapS: f.num(k, row[k], 0) / 1000 };
  const at = f.num("timestamp", row.timestamp, 0);
  if (c.prevTimestamp === undefined)
    f.fail("timestamp", "the session's previous row gave a delay: this one gives its delay too");
  if (at < c.prevTimestamp) f.fail("timestamp", `${at} is before the session's previous row`);
  return { gapS: (at - c.prevTimestamp) / 1000, at };
}

export function readMooncakeRow(
  f: Fields,
  row: Json,
  c: MooncakeRowContext,
): { request: SimRequestSpec; startS?: number; at?: number } {
  if (row.kvctl !== undefined)
    f.fail("kvctl", "a file's rows carry kvctl objects only when its first row has kvctl.workload");
  const p = prompt(f, row, c.blockSize);
  const out = f.int("output_length", row.output_length, 0);
  const { gapS, at } = timing(f, row, c);
  const request: SimRequestSpec = {
    prompt: p,
    output: out > 0 ? [{ seed: OUTPUT_SEED_BASE + c.index, len: out }] : [],
    reasoningTokens: 0,
    gapS,
    gapKind: c.firstOfSession ? "start" : c.gapKind,
  };
  return { request, ...(c.firstOfSession ? { startS: (at as number) / 1000 } : {}), at };
}
