// The expected-waste rule of one paused program (src/policy/retention.ts): exact decisions and
// wastes for given gap distributions and costs.
import { describe, expect, it } from "vitest";
import { DurationModel } from "../src/policy/duration-model.js";
import { decideRetention, type RetentionCosts } from "../src/policy/retention.js";

const model = () =>
  new DurationModel({ priorMeanSeconds: 10, minSamples: 4, maxSamples: 100, maxTools: 8 });
// 4000 tokens in 250 pages of 16: re-prefill 1 s, restore 0.1 s.
const COSTS: RetentionCosts = {
  tokens: 4000,
  pageSize: 16,
  prefillTokensPerSecond: 4000,
  restoreTokensPerSecond: 40_000,
  deviceHoldCostPerBlockSecond: 0.0001,
  hostHoldCostPerBlockSecond: 0.00001,
  leaseSeconds: 300,
  taus: [1, 2, 5],
};

function withSamples(tool: string, xs: number[]): DurationModel {
  const m = model();
  for (const x of xs) m.record(tool, x);
  return m;
}

describe("decideRetention", () => {
  it("keeps a program whose tool returns in seconds resident, for the shortest TTL that covers it", () => {
    const d = decideRetention(withSamples("grep", [1, 1, 2, 2]), ["grep"], COSTS);
    // keep(1) = 250 x 1 x 1e-4 + 0.5 x 1 = 0.525; keep(2) = 250 x 1.5 x 1e-4 = 0.0375 (keep(5) ties, not better)
    // park = 0.1 + 250 x 1.5 x 1e-5 = 0.10375; let go = 1
    expect(d.action).toBe("keep");
    expect(d.ttlSeconds).toBe(2);
    expect(d.waste.keep).toBeCloseTo(0.0375, 10);
    expect(d.waste.park).toBeCloseTo(0.10375, 10);
    expect(d.waste.letGo).toBe(1);
    expect(d.predictedGapSeconds).toBe(2);
  });

  it("parks a large context whose tool runs minutes on host under the lease", () => {
    const d = decideRetention(withSamples("build", [100, 100, 200, 200]), ["build"], COSTS);
    // keep(1) = 0.025 + 1 = 1.025 (the best keep); park = 0.1 + 250 x 150 x 1e-5 = 0.475; let go = 1
    expect(d.action).toBe("park");
    expect(d.ttlSeconds).toBe(300);
    expect(d.waste.keep).toBeCloseTo(1.025, 10);
    expect(d.waste.park).toBeCloseTo(0.475, 10);
    expect(d.predictedGapSeconds).toBe(200);
  });

  it("lets a small context go when its tool outlasts the lease", () => {
    const d = decideRetention(withSamples("crawl", [1000, 1000, 1000, 1000]), ["crawl"], {
      ...COSTS,
      tokens: 160,
    });
    // 10 blocks, re-prefill 0.04: keep(1) = 0.001 + 0.04 = 0.041; park = 0.004 + 10 x 300 x 1e-5 + 0.04 = 0.074
    expect(d.action).toBe("let_go");
    expect(d.ttlSeconds).toBe(0);
    expect(d.waste.letGo).toBeCloseTo(0.04, 10);
    expect(d.waste.keep).toBeCloseTo(0.041, 10);
    expect(d.waste.park).toBeCloseTo(0.074, 10);
  });

  it("uses the exponential prior for a tool with too few samples, and the longest of parallel calls", () => {
    const m = model();
    // E[min(D, 5)] with mean 10 = 10 (1 - e^-0.5)
    expect(m.expectedMin("new", 5)).toBeCloseTo(10 * (1 - Math.exp(-0.5)), 10);
    const one = decideRetention(m, ["new"], COSTS);
    const keep5 = 250 * 10 * (1 - Math.exp(-0.5)) * 1e-4 + Math.exp(-0.5) * 1;
    const keep1 = 250 * 10 * (1 - Math.exp(-0.1)) * 1e-4 + Math.exp(-0.1) * 1;
    const keep2 = 250 * 10 * (1 - Math.exp(-0.2)) * 1e-4 + Math.exp(-0.2) * 1;
    expect(one.waste.keep).toBeCloseTo(Math.min(keep1, keep2, keep5), 10);
    const park = 0.1 + 250 * 10 * (1 - Math.exp(-30)) * 1e-5 + Math.exp(-30);
    expect(one.waste.park).toBeCloseTo(park, 10);
    expect(one.action).toBe("park");
    expect(one.predictedGapSeconds).toBeCloseTo(10 * Math.LN2, 10);
    // Two calls in parallel: the gap is the longer; a fast tool beside a slow one predicts the slow one's.
    m.record("fast", 1);
    m.record("fast", 1);
    m.record("fast", 1);
    m.record("fast", 1);
    expect(decideRetention(m, ["fast", "new"], COSTS).predictedGapSeconds).toBeCloseTo(
      10 * Math.LN2,
      10,
    );
  });

  it("rejects costs that cannot be priced", () => {
    expect(() => decideRetention(model(), [], { ...COSTS, prefillTokensPerSecond: 0 })).toThrow(
      /prefillTokensPerSecond/,
    );
    expect(() => decideRetention(model(), [], { ...COSTS, taus: [] })).toThrow(/tau/);
  });
});
