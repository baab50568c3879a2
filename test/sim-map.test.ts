// The regime map's grid: the 48 cells, each named by the families of its axes at their
// hard end (bench:sim --map runs them; its smoke size is run by hand, see docs/sim.md).
import { describe, expect, it } from "vitest";
import {
  cellFamilies,
  cellPlan,
  MAP_AXES,
  mapCells,
  planMap,
  programsToReach,
} from "../src/sim/map.js";

/** The grid's easiest cell. */
const BASE = {
  workers: 8,
  oversubscription: 0.7,
  context: 8192,
  gaps: "seconds",
  flood: false,
} as const;

describe("the regime map's grid", () => {
  it("holds every combination of the issue's axes once", () => {
    const cells = mapCells(MAP_AXES);
    expect(cells).toHaveLength(2 * 3 * 2 * 2 * 2);
    expect(new Set(cells.map((c) => JSON.stringify(c))).size).toBe(48);
  });

  it("names a cell's families by its hard ends", () => {
    const base = BASE;
    expect(cellFamilies(base)).toEqual([]);
    expect(cellFamilies({ ...base, workers: 64, oversubscription: 0.7 })).toEqual([]);
    expect(cellFamilies({ ...base, workers: 64, oversubscription: 2 })).toEqual(["fleet"]);
    expect(cellFamilies({ ...base, workers: 8, oversubscription: 4 })).toEqual([]);
    expect(
      cellFamilies({
        workers: 64,
        oversubscription: 4,
        context: 65536,
        gaps: "minutes",
        flood: true,
      }),
    ).toEqual(["fleet", "long_context", "minute_gaps", "floods"]);
  });
});

describe("a cell sized to reach its oversubscription", () => {
  const plan = { hostRatio: 2, pageSize: 64 };
  const cell = BASE;

  it("holds the fewest programs (on its step) whose working set reaches the axis", () => {
    const n = programsToReach(plan, cell, 1);
    const at = cellPlan(plan, cell, 1, n);
    expect(at.effective).toBeGreaterThanOrEqual(0.7);
    // One step fewer falls short: the search did not overshoot.
    expect(cellPlan(plan, cell, 1, Math.floor(n / 1.25)).effective).toBeLessThan(0.7);
    // The pools then are the grid's own, not the largest request's floor.
    const small = cellPlan(plan, cell, 1, 16);
    expect(small.effective).toBeLessThan(0.2);
    expect(at.requests).toBeGreaterThan(small.requests);
  });

  it("plans every cell of a narrowed grid without running it", () => {
    const cells = planMap({
      axes: {
        ...MAP_AXES,
        workers: [8],
        oversubscription: [0.7, 2],
        context: [8192],
        flood: [false],
      },
      seeds: [1, 2],
      programsPerCell: "reach",
      profile: "h100_sxm/llama-3.1-70b",
      ...plan,
      tree: "",
    });
    expect(cells).toHaveLength(4);
    for (const c of cells) {
      expect(c.requests_per_seed).toHaveLength(2);
      expect(c.effective_oversubscription).toBeGreaterThanOrEqual(c.oversubscription * 0.9);
    }
    const [lo, hi] = [cells[0], cells.find((c) => c.oversubscription === 2)];
    expect(hi?.programs).toBeGreaterThan(lo.programs);
  });
});
