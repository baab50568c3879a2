// npm run bench:sim [-- --json] [-- --smoke]: the fleet-scale case of kvctl sim (64 workers,
// 2,000 generated programs, an H100 profile, every configuration and the oracle), or with --smoke
// the same code on 2 workers and a handful of programs. Every `kvctl sim` option is taken, and
// overrides a size.
// The last line with --json: {"bench":"sim","wall_s",..,"configs":{name:{figures}},"oracle":{..}}.
// --map runs the regime map instead (map.ts): {"bench":"sim-map",..,"cells":[..]}; --workers,
// --oversubscription, --context, --gaps (comma lists) and --floods off|on|off,on keep part of its
// grid; --programs reach sizes each cell to its axis's oversubscription; --plan prints what each
// cell would run ({"bench":"sim-map-plan",..}) and runs nothing.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { SIM_OPTIONS, simFromOptions } from "../src/cli/commands/sim.js";
import { buildPatchedTree } from "../src/demo/harness.js";
import { intOption } from "../src/sim/input.js";
import { MAP_AXES, type MapAxes, type MapOptions, planMap, runMap } from "../src/sim/map.js";
import { profileOf, SimInputError } from "../src/sim/run.js";
import { renderReport } from "../src/sim/report/index.js";
import { simSummary } from "../src/sim/summary.js";
import type { SimConfigResult, SimRunResult } from "../src/sim/types.js";

const FLEET = { workers: "64", programs: "2000", tenants: "16", profile: "h100_sxm/llama-3.1-70b" };
const SMOKE = { workers: "2", programs: "4", tenants: "2", context: "4096" };

const FIGURES = [
  "recomputed_tokens",
  "prefill_gpu_s",
  "ttft_p50_ms",
  "ttft_p90_ms",
  "goodput_programs_per_h",
] as const;

function figures(c: SimConfigResult): Record<string, number> {
  return Object.fromEntries(FIGURES.map((k) => [k, c[k]]));
}

/** The bench's last line: the run's shape and each configuration's headline figures. */
export function benchLine(r: SimRunResult): Record<string, unknown> {
  return {
    bench: "sim",
    wall_s: r.wall_s,
    simulated_s: r.simulated_s,
    workers: r.workers,
    programs: r.programs,
    requests: r.requests,
    profile: r.profile.name,
    validation: r.profile.validation,
    workload: r.workload,
    seed: r.seed,
    configs: Object.fromEntries(Object.entries(r.configs).map(([k, c]) => [k, figures(c)])),
    oracle: figures(r.oracle),
  };
}

const SMOKE_AXES: MapAxes = {
  workers: [2],
  oversubscription: [0.7],
  context: [4096],
  gaps: ["seconds"],
  flood: [false, true],
};

/** A comma-separated list of integers (`--seeds 1,2,3`, the map's `--workers 8,64`). */
function listOption(flag: string, v: unknown, dflt: number[], min = 0): number[] {
  if (v === undefined) return dflt;
  const xs = String(v)
    .split(",")
    .map((s) => intOption(flag, s.trim(), 0, min));
  if (new Set(xs).size !== xs.length)
    throw new SimInputError(`${flag}: a value given twice in ${JSON.stringify(v)}`);
  return xs;
}

/** A comma-separated subset of an axis's values (`--gaps minutes`, `--oversubscription 2,4`). */
function axisOption<T>(
  flag: string,
  v: unknown,
  axis: T[],
  parse: (s: string) => T,
  show: (x: T) => string = String,
): T[] {
  if (v === undefined) return axis;
  const xs = String(v)
    .split(",")
    .map((s) => {
      const x = parse(s.trim());
      if (!axis.includes(x))
        throw new SimInputError(
          `${flag}: ${JSON.stringify(s)} is not one of ${axis.map(show).join(", ")}`,
        );
      return x;
    });
  if (new Set(xs).size !== xs.length)
    throw new SimInputError(`${flag}: a value given twice in ${JSON.stringify(v)}`);
  return xs;
}

/** The grid's cells the options keep: each axis (the smoke size's under --smoke) narrowed to the
 * values given. */
function mapAxes(v: Record<string, string | boolean | undefined>): MapAxes {
  const base = v.smoke ? SMOKE_AXES : MAP_AXES;
  const floods: Record<string, boolean> = { off: false, on: true };
  return {
    workers: listOption("--workers", v.workers, base.workers, 1),
    oversubscription: axisOption(
      "--oversubscription",
      v.oversubscription,
      base.oversubscription,
      Number,
    ),
    context: axisOption("--context", v.context, base.context, Number),
    gaps: axisOption("--gaps", v.gaps, base.gaps, (s) => s as "seconds" | "minutes"),
    flood: axisOption(
      "--floods",
      v.floods,
      base.flood,
      (s) => floods[s] ?? (s as never),
      (x) => (x ? "on" : "off"),
    ),
  };
}

/** `--programs N` or `--programs reach` (each cell as many as its oversubscription needs). */
function programsOption(v: unknown, dflt: number): MapOptions["programsPerCell"] {
  return v === "reach" ? "reach" : intOption("--programs", v as string, dflt, 1);
}

/** The regime map on the grid (smoke: two cells, one seed), one H100 70B profile; with
 * --plan, what each cell would run (programs, requests), nothing run. */
async function map(v: Record<string, string | boolean | undefined>): Promise<unknown> {
  const profile = (v.profile as string | undefined) ?? "h100_sxm/llama-3.1-70b";
  const tree = buildPatchedTree();
  try {
    const { ref, shape } = await profileOf(profile, tree.dir);
    const o: MapOptions = {
      axes: mapAxes(v),
      seeds: listOption("--seeds", v.seeds, v.smoke ? [1] : [1, 2, 3]),
      programsPerCell: programsOption(v.programs, v.smoke ? 6 : 16),
      profile,
      hostRatio: shape.host_kv_tokens / shape.device_kv_tokens,
      pageSize: shape.page_size,
      tree: tree.dir,
      parallel: intOption("--parallel", v.parallel as string, 2, 1),
      progress: (l) => console.error(l),
    };
    if (v.plan) return mapPlanLine(o);
    const t0 = performance.now();
    const r = await runMap(o, ref);
    return { ...r, wall_s: Math.round((performance.now() - t0) / 10) / 100 };
  } finally {
    tree.remove();
  }
}

/** --plan's line: each cell's size and the requests the whole map would simulate. */
function mapPlanLine(o: MapOptions): unknown {
  const cells = planMap(o);
  let requests = 0;
  for (const c of cells) for (const n of c.requests_per_seed) requests += n;
  return { bench: "sim-map-plan", seeds: o.seeds, requests, cells };
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      ...SIM_OPTIONS,
      smoke: { type: "boolean" },
      map: { type: "boolean" },
      seeds: { type: "string" },
      oversubscription: { type: "string" },
      floods: { type: "string" },
      plan: { type: "boolean" },
    },
  });
  const {
    json,
    smoke,
    map: isMap,
    seeds: _s,
    oversubscription: _o,
    floods: _f,
    plan: _p,
    ...rest
  } = values;
  const opts = { ...(smoke ? SMOKE : FLEET), ...rest };
  try {
    if (isMap) {
      const m = await map(values);
      console.log(json ? JSON.stringify(m) : JSON.stringify(m, null, 1));
      return 0;
    }
    const r = await simFromOptions(opts, (l) => console.error(l));
    if (values.report) writeFileSync(values.report, renderReport([r]));
    console.log(json ? JSON.stringify(benchLine(r)) : simSummary(r));
    return 0;
  } catch (e) {
    if (!(e instanceof SimInputError)) throw e;
    console.error(`bench:sim: ${e.message}`);
    return 2;
  }
}

process.exitCode = await main();
