// What `kvctl sim` and `npm run bench:sim` replay, from their options: a generated family or a
// JSONL trace, each checked before anything runs (a bad field is named, nothing starts).
import { type GapScale, generateWorkload, readTraceFile } from "./workload/index.js";
import type { SimWorkload } from "./types.js";
import { SimInputError } from "./run.js";

export interface WorkloadOptions {
  /** A JSONL trace (docs/sim.md, "The JSONL trace format"); else a generated workload. */
  trace?: string;
  /** A plain Mooncake trace: tokens per hash id (Dynamo's `--trace-block-size`). */
  traceBlockSize?: number;
  seed: number;
  programs: number;
  tenants: number;
  context: number;
  gaps: string;
  flood: boolean;
}

export function simWorkload(o: WorkloadOptions): SimWorkload {
  try {
    if (o.trace !== undefined) return readTraceFile(o.trace, { blockSize: o.traceBlockSize });
    if (o.gaps !== "seconds" && o.gaps !== "minutes")
      throw new RangeError(`gaps: expected "seconds" or "minutes", got ${JSON.stringify(o.gaps)}`);
    return generateWorkload({
      seed: o.seed,
      programs: o.programs,
      tenants: o.tenants,
      context: o.context,
      gaps: o.gaps as GapScale,
      flood: o.flood,
    });
  } catch (e) {
    if (e instanceof SimInputError) throw e;
    const where = o.trace !== undefined ? `trace ${o.trace}: ` : "";
    throw new SimInputError(`${where}${e instanceof Error ? e.message : String(e)}`);
  }
}

/** A whole number option (flag name for the error). */
export function intOption(flag: string, v: string | undefined, dflt: number, min = 0): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min)
    throw new SimInputError(`${flag}: expected an integer >= ${min}, got ${JSON.stringify(v)}`);
  return n;
}
