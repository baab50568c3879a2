// What the report accepts: the engine's result types (../types.ts), checked before anything is
// drawn, so a bad figure is refused naming its field instead of becoming a wrong chart. The
// schemas are typed against the interfaces: a required field added there fails to compile here.
import { z } from "zod";
import { fieldPath } from "../../protocol/index.js";
import type { SimConfigResult, SimMapResult, SimProfileRef, SimRunResult } from "../types.js";
import { ORACLE } from "./style.js";

export class SimReportInputError extends Error {
  /** Path of the offending field, e.g. `runs[0].configs.lru.ttft_cdf[3]`. */
  readonly field: string;
  constructor(field: string, problem: string) {
    super(`${field}: ${problem}`);
    this.name = "SimReportInputError";
    this.field = field;
  }
}

const figure = z.number().nonnegative();
const whole = z.number().int().nonnegative();
const name = z.string().min(1);

const percentiles = z.object({ n: whole, p50_ms: figure, p90_ms: figure, p99_ms: figure });

const configResult: z.ZodType<SimConfigResult> = z.object({
  recomputed_tokens: figure,
  prefill_gpu_s: figure,
  ttft_p50_ms: figure,
  ttft_p90_ms: figure,
  ttft_p99_ms: figure,
  goodput_programs_per_h: figure,
  ttft_all: percentiles,
  ttft_by_gap: z.record(name, percentiles),
  ttft_by_context: z.record(name, percentiles),
  bytes_moved: z.record(name, figure),
  commands: z.record(name, z.object({ sent: whole, acked: z.record(name, whole) })),
  // Checked point by point in checkCdf: a run's CDF holds a point per distinct TTFT, and a
  // schema per tuple costs more than the rest of the report.
  ttft_cdf: z.custom<[number, number][]>(Array.isArray, "expected an array of [ms, share]"),
  errors: whole,
});

const profile: z.ZodType<SimProfileRef> = z.object({
  name,
  gpu: name,
  model: name,
  tp: z.number().int().positive(),
  validation: name,
});

const runResult: z.ZodType<SimRunResult> = z.object({
  bench: z.literal("sim"),
  wall_s: figure,
  simulated_s: figure,
  workers: z.number().int().positive(),
  programs: whole,
  requests: whole,
  seed: z.number().int(),
  profile,
  workload: name,
  configs: z.record(name, configResult),
  oracle: configResult,
});

const mapFigures = z.object({ ttft_p90_ms: figure, gpu_s_per_program: figure });

const mapResult: z.ZodType<SimMapResult> = z.object({
  bench: z.literal("sim-map"),
  profile,
  seeds: z.array(z.number().int()),
  programs_per_cell: whole,
  cells: z.array(
    z.object({
      families: z.array(name),
      workers: z.number().int().positive(),
      oversubscription: z.number().positive(),
      context: z.number().int().positive(),
      gaps: z.enum(["seconds", "minutes"]),
      flood: z.boolean(),
      best_peer: mapFigures.extend({ name }),
      kvctl: mapFigures,
      oracle: mapFigures,
    }),
  ),
});

function parse<T>(schema: z.ZodType<T>, value: unknown, at: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  throw new SimReportInputError(fieldPath([at, ...issue.path]), issue.message);
}

function checkPercentiles(
  at: string,
  p: { p50: number; p90: number; p99: number },
  names: [string, string, string],
): void {
  if (p.p90 < p.p50) throw new SimReportInputError(at, `${names[1]} is below ${names[0]}`);
  if (p.p99 < p.p90) throw new SimReportInputError(at, `${names[2]} is below ${names[1]}`);
}

function checkCdf(at: string, cdf: unknown[]): void {
  let last: [number, number] = [0, 0];
  cdf.forEach((point, i) => {
    const ok =
      Array.isArray(point) &&
      point.length === 2 &&
      Number.isFinite(point[0]) &&
      Number.isFinite(point[1]);
    if (!ok) throw new SimReportInputError(`${at}[${i}]`, "expected [ms, share], two numbers");
    const [msAt, share] = point as [number, number];
    if (msAt < 0) throw new SimReportInputError(`${at}[${i}][0]`, `${msAt} ms is negative`);
    if (share < 0 || share > 1)
      throw new SimReportInputError(`${at}[${i}][1]`, `share ${share} is outside [0, 1]`);
    if (msAt < last[0] || share < last[1])
      throw new SimReportInputError(`${at}[${i}]`, "the CDF must be ascending");
    last = [msAt, share];
  });
}

function checkConfig(at: string, c: SimConfigResult): void {
  checkPercentiles(at, { p50: c.ttft_p50_ms, p90: c.ttft_p90_ms, p99: c.ttft_p99_ms }, [
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
  ]);
  for (const key of ["ttft_by_gap", "ttft_by_context"] as const) {
    for (const [bucket, p] of Object.entries(c[key])) {
      checkPercentiles(`${at}.${key}.${bucket}`, { p50: p.p50_ms, p90: p.p90_ms, p99: p.p99_ms }, [
        "p50_ms",
        "p90_ms",
        "p99_ms",
      ]);
    }
  }
  checkCdf(`${at}.ttft_cdf`, c.ttft_cdf);
  for (const [type, { sent, acked }] of Object.entries(c.commands)) {
    const answered = Object.values(acked).reduce((a, b) => a + b, 0);
    if (answered > sent)
      throw new SimReportInputError(
        `${at}.commands.${type}.acked`,
        `${answered} acks for ${sent} commands sent`,
      );
  }
}

/** The runs, checked field by field; throws SimReportInputError naming the first bad one. */
export function checkRuns(runs: unknown): SimRunResult[] {
  if (!Array.isArray(runs)) throw new SimReportInputError("runs", "expected an array of results");
  return runs.map((raw, i) => {
    const at = `runs[${i}]`;
    const run = parse(runResult, raw, at);
    const names = Object.keys(run.configs);
    if (names.length === 0) throw new SimReportInputError(`${at}.configs`, "no configuration");
    if (names.includes(ORACLE))
      throw new SimReportInputError(
        `${at}.configs.${ORACLE}`,
        `"${ORACLE}" names the bound every configuration is read against; rename it`,
      );
    for (const n of names) checkConfig(`${at}.configs.${n}`, run.configs[n]);
    checkConfig(`${at}.oracle`, run.oracle);
    return run;
  });
}

/** The regime map, checked field by field; each cell's axes must be unique. */
export function checkMap(raw: unknown): SimMapResult {
  const map = parse(mapResult, raw, "map");
  if (map.cells.length === 0) throw new SimReportInputError("map.cells", "no cells");
  const seen = new Map<string, number>();
  map.cells.forEach((c, i) => {
    const key = JSON.stringify([c.workers, c.oversubscription, c.context, c.gaps, c.flood]);
    const first = seen.get(key);
    if (first !== undefined)
      throw new SimReportInputError(`map.cells[${i}]`, `the same axes as map.cells[${first}]`);
    seen.set(key, i);
  });
  return map;
}
