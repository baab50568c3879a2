// npm run bench:sim [-- --json] [-- --smoke]: the fleet-scale case of kvctl sim (64 workers,
// 2,000 generated programs, an H100 profile, every configuration and the oracle), or with --smoke
// the same code on 2 workers and a handful of programs. Every `kvctl sim` option is taken, and
// overrides a size.
// The last line with --json: {"bench":"sim","wall_s",..,"configs":{name:{figures}},"oracle":{..}}.
// --map runs the regime map instead (map.ts): {"bench":"sim-map",..,"cells":[..]}.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { SIM_OPTIONS, simFromOptions } from "../src/cli/commands/sim.js";
import { buildPatchedTree } from "../src/demo/harness.js";
import { intOption } from "../src/sim/input.js";
import { MAP_AXES, type MapAxes, runMap } from "../src/sim/map.js";
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

/** The regime map on the grid (smoke: two cells, one seed), one H100 70B profile. */
async function map(v: Record<string, string | boolean | undefined>): Promise<unknown> {
  const profile = (v.profile as string | undefined) ?? "h100_sxm/llama-3.1-70b";
  const tree = buildPatchedTree();
  try {
    const { ref, shape } = await profileOf(profile, tree.dir);
    const t0 = performance.now();
    const r = await runMap(
      {
        axes: v.smoke
          ? SMOKE_AXES
          : { ...MAP_AXES, workers: listOption("--workers", v.workers, MAP_AXES.workers, 1) },
        seeds: listOption("--seeds", v.seeds, v.smoke ? [1] : [1, 2, 3]),
        programsPerCell: intOption("--programs", v.programs as string, v.smoke ? 6 : 16, 1),
        profile,
        hostRatio: shape.host_kv_tokens / shape.device_kv_tokens,
        pageSize: shape.page_size,
        tree: tree.dir,
        parallel: intOption("--parallel", v.parallel as string, 2, 1),
        progress: (l) => console.error(l),
      },
      ref,
    );
    return { ...r, wall_s: Math.round((performance.now() - t0) / 10) / 100 };
  } finally {
    tree.remove();
  }
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      ...SIM_OPTIONS,
      smoke: { type: "boolean" },
      map: { type: "boolean" },
      seeds: { type: "string" },
    },
  });
  const { json, smoke, map: isMap, seeds: _seeds, ...rest } = values;
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
