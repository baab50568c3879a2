// The cpu profile's tables from measured samples (bench/sim-cpu/fit.ts): measured cells pass
// through, shapes no batch can take come from a model of the measured ones, and the model's fit
// recovers the costs it was built from.
import { describe, expect, it } from "vitest";
import {
  feasible,
  fitNonNegative,
  median,
  prefillTable,
  prefillTerms,
  spread,
} from "../bench/sim-cpu/fit.js";

const axes = { batch: [1, 2, 4], extend: [16, 256, 1024, 4096], prefix: [0, 1024, 4096] };
const truth = [3, 0.5, 0.02, 4e-6];
const cost = (b: number, e: number, p: number) =>
  prefillTerms(b, e, p).reduce((s, v, j) => s + v * truth[j], 0);

describe("the cpu profile's prefill table", () => {
  it("median and spread of repeats", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    expect(spread([90, 100, 110])).toBeCloseTo(0.2);
  });

  it("a batch is feasible only when its new tokens fit the chunked-prefill budget", () => {
    expect(feasible({ batch: 2, extend: 2048, prefix: 0 }, 4096)).toBe(true);
    expect(feasible({ batch: 2, extend: 4096, prefix: 0 }, 4096)).toBe(false);
  });

  it("non-negative least squares recovers the costs a table was built from", () => {
    const cells = axes.batch.flatMap((b) =>
      axes.extend.flatMap((e) => axes.prefix.map((p) => [b, e, p])),
    );
    const coef = fitNonNegative(
      cells.map(([b, e, p]) => prefillTerms(b, e, p)),
      cells.map(([b, e, p]) => cost(b, e, p)),
    );
    for (const [j, c] of coef.entries()) expect(c).toBeCloseTo(truth[j], 6);
  });

  it("keeps every measured cell and fills the shapes no batch can take from the model", () => {
    const measured = new Map<string, number>();
    for (const b of axes.batch)
      for (const e of axes.extend)
        for (const p of axes.prefix)
          if (b * e <= 4096) measured.set(`${b}/${e}/${p}`, cost(b, e, p) * (1 + 0.01 * (p % 3)));
    const t = prefillTable(axes, measured);
    // Measured cells unchanged (the 1% perturbation stays).
    expect(t.totalMs[0][3][2]).toBeCloseTo(cost(1, 4096, 4096) * 1.01, 2);
    // batch 4 x 4096 new tokens: filled, near the cost that built the table.
    expect(t.filled).toContainEqual({ batch: 4, extend: 4096, prefix: 0 });
    expect(t.filled.every((c) => c.batch * c.extend > 4096)).toBe(true);
    expect(t.totalMs[2][3][0] / cost(4, 4096, 0)).toBeGreaterThan(0.97);
    expect(t.totalMs[2][3][0] / cost(4, 4096, 0)).toBeLessThan(1.03);
    expect(Math.max(...t.residuals.map(Math.abs))).toBeLessThan(0.02);
  });
});
