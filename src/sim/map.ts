// The regime map (`bench:sim -- --map`): kvctl, the best peer and the oracle over a grid of
// regimes (workers x KV oversubscription x context x gap scale x flood), several seeds a cell,
// medians over the seeds. A cell's workers get device pools sized so the workload's peak live
// working set is `oversubscription` times the fleet's device + host capacity (the host pool
// keeps the profile's host:device ratio).
import { CONFIG_NAMES } from "./configs.js";
import { FleetProcesses, runSim, SimInputError } from "./run.js";
import type {
  SimConfigResult,
  SimMapCell,
  SimMapResult,
  SimProfileRef,
  SimRunResult,
  SimWorkload,
} from "./types.js";
import { generateWorkload, segmentsLength, workingSet } from "./workload/index.js";

export interface MapAxes {
  workers: number[];
  oversubscription: number[];
  context: number[];
  gaps: ("seconds" | "minutes")[];
  flood: boolean[];
}

/** The grid. */
export const MAP_AXES: MapAxes = {
  workers: [8, 64],
  oversubscription: [0.7, 2, 4],
  context: [8192, 65536],
  gaps: ["seconds", "minutes"],
  flood: [false, true],
};

export interface MapOptions {
  axes: MapAxes;
  seeds: number[];
  /** Agent programs in a cell, whatever its workers (the map's cost on this machine grows with
   * programs; docs/sim.md, "The regime map", says why it is not scaled with the workers), or
   * "reach": as many as the cell needs to run at its axis's oversubscription (programsToReach). */
  programsPerCell: number | "reach";
  profile: string;
  /** The profile's host:device KV ratio and page size (a cell keeps them). */
  hostRatio: number;
  pageSize: number;
  tree: string;
  parallel?: number;
  progress?: (line: string) => void;
}

type Cell = Omit<SimMapCell, "families" | "best_peer" | "kvctl" | "oracle">;

export function mapCells(a: MapAxes): Cell[] {
  const out: Cell[] = [];
  for (const workers of a.workers)
    for (const oversubscription of a.oversubscription)
      for (const context of a.context)
        for (const gaps of a.gaps)
          for (const flood of a.flood)
            out.push({ workers, oversubscription, context, gaps, flood });
  return out;
}

/** The families of a cell's axes at their hard end. */
export function cellFamilies(c: Cell): string[] {
  const f: string[] = [];
  if (c.workers >= 64 && c.oversubscription >= 2) f.push("fleet");
  if (c.context >= 65536) f.push("long_context");
  if (c.gaps === "minutes") f.push("minute_gaps");
  if (c.flood) f.push("floods");
  return f;
}

const median = (xs: number[]) => {
  const s = xs.slice().sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const figures = (c: SimConfigResult, programs: number) => ({
  ttft_p90_ms: c.ttft_p90_ms,
  gpu_s_per_program: Math.round((c.prefill_gpu_s / programs) * 1000) / 1000,
});

type Figures = ReturnType<typeof figures>;

/** Medians over the seeds; the best peer is the one with the lowest median TTFT p90. */
function summarize(c: Cell, cellRuns: CellRun[]): SimMapCell {
  const runs = cellRuns.map((r) => r.figures);
  const med = (name: string) => ({
    ttft_p90_ms: median(runs.map((r) => r[name].ttft_p90_ms)),
    gpu_s_per_program: median(runs.map((r) => r[name].gpu_s_per_program)),
  });
  const peers = CONFIG_NAMES.filter((n) => n !== "kvctl").map((name) => ({ name, ...med(name) }));
  peers.sort((a, b) => a.ttft_p90_ms - b.ttft_p90_ms || a.gpu_s_per_program - b.gpu_s_per_program);
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    programs: cellRuns[0].programs,
    effective_oversubscription: round3(median(cellRuns.map((r) => r.effective))),
    pressure: {
      h2d_mb_per_program: round3(median(cellRuns.map((r) => r.pressure.h2d_mb_per_program))),
      recomputed_over_oracle: round3(
        median(cellRuns.map((r) => r.pressure.recomputed_over_oracle)),
      ),
    },
    families: cellFamilies(c),
    ...c,
    best_peer: peers[0],
    kvctl: med("kvctl"),
    oracle: med("oracle"),
  };
}

interface CellRun {
  figures: Record<string, Figures>;
  programs: number;
  /** The working set over the fleet's device + host capacity the cell actually ran at. */
  effective: number;
  pressure: NonNullable<SimMapCell["pressure"]>;
}

/** The pressure gauge (SimMapCell.pressure): plain SGLang with HiCache and KV-aware routing. */
function pressureOf(r: SimRunResult, programs: number): CellRun["pressure"] {
  const c = r.configs.cache_aware;
  if (!c) return { h2d_mb_per_program: 0, recomputed_over_oracle: 0 };
  return {
    h2d_mb_per_program: (c.bytes_moved.h2d ?? 0) / 1e6 / programs,
    recomputed_over_oracle: c.recomputed_tokens / Math.max(1, r.oracle.recomputed_tokens),
  };
}

/** A cell's workload at `programs` and the pools that give its oversubscription. */
export function cellPlan(o: PlanOptions, c: Cell, seed: number, programs: number): CellPlan {
  const workload = generateWorkload({
    seed,
    programs,
    tenants: Math.max(1, Math.min(c.workers / 4, Math.floor(programs / 4))),
    context: c.context,
    gaps: c.gaps,
    flood: c.flood,
  });
  const live = workingSet(workload).peak_live_tokens;
  const perWorker = live / (c.oversubscription * c.workers);
  // A pool holds at least the largest request: where the grid asks for less, the cell runs at a
  // lower oversubscription than its axis, and says so.
  const device = Math.max(
    fitsLargest(workload, o.pageSize),
    Math.floor(perWorker / (1 + o.hostRatio) / o.pageSize) * o.pageSize,
  );
  const host = Math.floor((device * o.hostRatio) / o.pageSize) * o.pageSize;
  let requests = 0;
  for (const p of workload.programs) requests += p.requests.length;
  return { workload, device, host, requests, effective: live / (c.workers * (device + host)) };
}

export type PlanOptions = Pick<MapOptions, "hostRatio" | "pageSize">;

export interface CellPlan {
  workload: SimWorkload;
  device: number;
  host: number;
  /** Requests of every kind the workload holds (agent turns and the flood's). */
  requests: number;
  /** The working set over the fleet's device + host capacity the cell runs at. */
  effective: number;
}

/** The most programs "reach" tries for a cell before it says the cell cannot be reached. */
export const REACH_LIMIT = 50_000;

/**
 * The fewest programs (16, then a quarter more each step) whose peak live working set is the
 * cell's oversubscription times the fleet's device + host capacity with pools that hold the
 * largest request: programs arrive over the same window, so more of them are live at once.
 */
export function programsToReach(o: PlanOptions, c: Cell, seed: number): number {
  for (let n = 16; ; n = Math.ceil(n * 1.25)) {
    if (n > REACH_LIMIT)
      throw new SimInputError(
        `map cell ${JSON.stringify(c)}: ${REACH_LIMIT} programs do not reach ${c.oversubscription}x`,
      );
    if (cellPlan(o, c, seed, n).effective >= c.oversubscription) return n;
  }
}

async function runCell(
  o: MapOptions,
  c: Cell,
  seed: number,
  fleets: FleetProcesses,
  programs: number,
): Promise<CellRun> {
  const { workload, device, host, effective } = cellPlan(o, c, seed, programs);
  const r = await runSim({
    workload,
    profile: o.profile,
    workers: c.workers,
    seed,
    pool: { deviceTokens: device, hostTokens: host },
    tree: o.tree,
    fleets,
    parallel: o.parallel,
    progress: o.progress,
  });
  const out: Record<string, Figures> = { oracle: figures(r.oracle, programs) };
  for (const [k, v] of Object.entries(r.configs)) out[k] = figures(v, programs);
  return { figures: out, programs, effective, pressure: pressureOf(r, programs) };
}

async function cellRun(
  o: MapOptions,
  c: Cell,
  seed: number,
  fleets: FleetProcesses,
  programs: number,
) {
  try {
    return await runCell(o, c, seed, fleets, programs);
  } catch (e) {
    if (e instanceof SimInputError)
      throw new SimInputError(`map cell ${JSON.stringify(c)}: ${e.message}`);
    throw e;
  }
}

/** Device tokens (page multiple) that hold the workload's largest request and a page more. */
function fitsLargest(w: SimWorkload, page: number): number {
  let most = 0;
  for (const p of w.programs)
    for (const r of p.requests)
      most = Math.max(most, segmentsLength(r.prompt) + segmentsLength(r.output));
  return (Math.ceil(most / page) + 1) * page;
}

/** A cell's programs: the option's, or under "reach" those its first seed needs (every seed of
 * the cell then runs that many, so its medians are over one size). */
function cellPrograms(o: MapOptions, c: Cell): number {
  if (o.programsPerCell !== "reach") return o.programsPerCell;
  return programsToReach(o, c, o.seeds[0]);
}

/** What each cell would run (programs, requests, the oversubscription reached), nothing run:
 * the map's size before it is paid for. */
export function planMap(o: MapOptions): MapPlanCell[] {
  return mapCells(o.axes).map((c) => {
    const programs = cellPrograms(o, c);
    const plans = o.seeds.map((seed) => cellPlan(o, c, seed, programs));
    return {
      ...c,
      programs,
      requests_per_seed: plans.map((p) => p.requests),
      effective_oversubscription: Math.round(median(plans.map((p) => p.effective)) * 1000) / 1000,
    };
  });
}

export type MapPlanCell = Cell & {
  programs: number;
  requests_per_seed: number[];
  effective_oversubscription: number;
};

export async function runMap(o: MapOptions, ref: SimProfileRef): Promise<SimMapResult> {
  // One set of fleet processes for the whole map: starting one costs seconds of imports.
  const fleets = new FleetProcesses({ tree: o.tree });
  const out: SimMapCell[] = [];
  try {
    const grid = mapCells(o.axes);
    for (const [i, c] of grid.entries()) {
      const runs = [];
      const programs = cellPrograms(o, c);
      for (const seed of o.seeds) {
        o.progress?.(
          `sim map: cell ${i + 1}/${grid.length} ${JSON.stringify(c)}, seed ${seed}, ${programs} programs`,
        );
        runs.push(await cellRun(o, c, seed, fleets, programs));
      }
      out.push(summarize(c, runs));
      // Each cell as it ends, so a map cut short still leaves the cells it finished.
      o.progress?.(`sim map: cell ${i + 1}/${grid.length} done ${JSON.stringify(out.at(-1))}`);
    }
  } finally {
    await fleets.close();
  }
  return {
    bench: "sim-map",
    profile: ref,
    seeds: o.seeds,
    programs_per_cell: Math.max(...out.map((c) => c.programs ?? 0)),
    cells: out,
  };
}
