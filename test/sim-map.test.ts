// The regime map's grid: the 48 cells, each named by the families of its axes at their
// hard end (bench:sim --map runs them; its smoke size is run by hand, see docs/sim.md).
import { describe, expect, it } from "vitest";
import { cellFamilies, MAP_AXES, mapCells } from "../src/sim/map.js";

describe("the regime map's grid", () => {
  it("holds every combination of the issue's axes once", () => {
    const cells = mapCells(MAP_AXES);
    expect(cells).toHaveLength(2 * 3 * 2 * 2 * 2);
    expect(new Set(cells.map((c) => JSON.stringify(c))).size).toBe(48);
  });

  it("names a cell's families by its hard ends", () => {
    const base = {
      workers: 8,
      oversubscription: 0.7,
      context: 8192,
      gaps: "seconds",
      flood: false,
    } as const;
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
