// kvctl sim's generated programs against the distributions docs/sim.md cites: steps per turn and
// turns per session at TraceLab's percentiles, human gaps at their stated median and spread per gap
// scale, heavy-tailed tool gaps, outputs and their reasoning share, contexts that grow to their
// limit and compact there, shared prefixes within a tenant and nothing shared across tenants,
// floods of unrelated single requests, determinism in the seed, and bad options refused by name.
import { describe, expect, it } from "vitest";
import type { SimProgram, SimRequestSpec, SimWorkload } from "../src/sim/types.js";
import { generateWorkload, type GenerateOptions } from "../src/sim/workload/generated.js";
import { AGENT_SHAPE } from "../src/sim/workload/shape.js";
import { segmentsLength } from "../src/sim/workload/tokens.js";
import { workingSet } from "../src/sim/workload/working-set.js";

const base: GenerateOptions = {
  seed: 11,
  programs: 400,
  tenants: 3,
  context: 65536,
  gaps: "minutes",
  flood: false,
};
const agents = (w: SimWorkload) => w.programs.filter((p) => p.family === "generated");
const requests = (w: SimWorkload) => agents(w).flatMap((p) => p.requests);
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const quantile = (xs: number[], q: number) => sorted(xs)[Math.floor(q * (xs.length - 1))];
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const logStats = (xs: number[]) => {
  const l = xs.map(Math.log);
  const m = mean(l);
  return { median: Math.exp(m), sigma: Math.sqrt(mean(l.map((x) => (x - m) ** 2))) };
};

/** A program's user turns, each the list of its requests. */
function turnsOf(p: SimProgram): SimRequestSpec[][] {
  const turns: SimRequestSpec[][] = [];
  for (const r of p.requests) {
    if (r.gapKind !== "tool") turns.push([]);
    turns[turns.length - 1].push(r);
  }
  return turns;
}

describe("sim generated programs: shapes", () => {
  const w = generateWorkload({ ...base, programs: 3000, maxTurns: 1000 });

  it("draws steps per turn and turns per session at TraceLab's percentiles", () => {
    const steps = agents(w).flatMap((p) => turnsOf(p).map((t) => t.length - 1));
    expect(quantile(steps, 0.25)).toBe(0);
    expect(quantile(steps, 0.5)).toBe(1);
    expect(quantile(steps, 0.9)).toBeGreaterThanOrEqual(18);
    expect(quantile(steps, 0.9)).toBeLessThanOrEqual(21);
    expect(quantile(steps, 0.99)).toBeGreaterThanOrEqual(70);
    expect(Math.abs(mean(steps) / 7.8 - 1)).toBeLessThan(0.12);
    const turns = agents(w).map((p) => turnsOf(p).length);
    expect(quantile(turns, 0.5)).toBe(1);
    expect(quantile(turns, 0.9)).toBeGreaterThanOrEqual(15);
    expect(quantile(turns, 0.9)).toBeLessThanOrEqual(21);
    expect(Math.abs(mean(turns) / 9.2 - 1)).toBeLessThan(0.15);
  });

  it("waits minutes (or tens of seconds) for the human and heavy-tailed seconds for tools", () => {
    const human = requests(w).filter((r) => r.gapKind === "human");
    const { median, sigma } = logStats(human.map((r) => r.gapS));
    expect(Math.abs(median / 300 - 1)).toBeLessThan(0.1);
    expect(Math.abs(sigma - 1.2)).toBeLessThan(0.1);
    const secs = requests(generateWorkload({ ...base, gaps: "seconds" }));
    const s = logStats(secs.filter((r) => r.gapKind === "human").map((r) => r.gapS));
    expect(Math.abs(s.median / 30 - 1)).toBeLessThan(0.15);
    const tool = requests(w).filter((r) => r.gapKind === "tool");
    const t = tool.map((r) => r.gapS);
    // Per-tool medians between 0.5 and 8 s, lognormal sigma 1.2 around each: a heavy tail.
    expect(quantile(t, 0.5)).toBeGreaterThan(0.5);
    expect(quantile(t, 0.5)).toBeLessThan(8);
    expect(quantile(t, 0.99) / quantile(t, 0.5)).toBeGreaterThan(15);
    expect(tool.every((r) => typeof r.tool === "string")).toBe(true);
    // Few tools take most calls (Zipf over the tenant's twenty).
    const byTool = new Map<string, number>();
    for (const r of tool) byTool.set(r.tool!, (byTool.get(r.tool!) ?? 0) + 1);
    const top3 = sorted([...byTool.values()]).slice(-3);
    expect(top3.reduce((a, b) => a + b, 0) / tool.length).toBeGreaterThan(0.4);
    expect(byTool.size).toBe(AGENT_SHAPE.toolsPerTenant);
  });

  it("answers with TraceLab's mean output, 40% of it reasoning the next prompt drops", () => {
    const rs = requests(w);
    const out = rs.map((r) => segmentsLength(r.output));
    expect(Math.abs(mean(out) / 523 - 1)).toBeLessThan(0.1);
    const reasoning = rs.reduce((n, r) => n + r.reasoningTokens, 0);
    expect(reasoning / out.reduce((a, b) => a + b, 0)).toBeCloseTo(0.4, 2);
    for (const p of agents(w).slice(0, 200))
      p.requests.forEach((r, i) => {
        const next = p.requests[i + 1];
        if (!next) return;
        const seeds = new Set(next.prompt.map((s) => s.seed));
        // The answer joins the history (unless compaction rewrote it), the reasoning never does.
        if (!next.rewrite) expect(seeds.has(r.output[r.output.length - 1].seed)).toBe(true);
        if (r.reasoningTokens > 0) expect(seeds.has(r.output[0].seed)).toBe(false);
      });
  });

  it("grows contexts to their limit, compacts there, and never outgrows the context", () => {
    for (const context of [8192, 65536]) {
      const g = generateWorkload({ ...base, context, maxTurns: 1000 });
      const rs = requests(g);
      const seq = rs.map((r) => segmentsLength(r.prompt) + segmentsLength(r.output));
      expect(Math.max(...seq)).toBeLessThanOrEqual(context);
      expect(Math.max(...seq)).toBeGreaterThan(0.75 * context);
      const rewrites = agents(g).flatMap((p) =>
        p.requests.flatMap((r, i) => (r.rewrite ? [[p.requests[i - 1], r]] : [])),
      );
      expect(rewrites.length).toBeGreaterThan(20);
      for (const [before, after] of rewrites)
        expect(segmentsLength(after.prompt)).toBeLessThan(segmentsLength(before.prompt));
      // About thirty steps from an empty history to the limit, as the growth is sized.
      const first = agents(g).flatMap((p) => {
        const k = p.requests.findIndex((r) => r.rewrite);
        return k > 0 ? [k] : [];
      });
      expect(quantile(first, 0.5)).toBeGreaterThan(15);
      expect(quantile(first, 0.5)).toBeLessThan(60);
    }
  });
});

describe("sim generated programs: tenants, floods, determinism", () => {
  it("shares tool schemas within a tenant, a system prompt per agent, nothing across tenants", () => {
    const w = generateWorkload(base);
    const byTenant = new Map<string, SimProgram[]>();
    for (const p of agents(w)) byTenant.set(p.tenant, [...(byTenant.get(p.tenant) ?? []), p]);
    expect([...byTenant.keys()].sort()).toEqual(["t0", "t1", "t2"]);
    const seedsOf = (ps: SimProgram[]) =>
      new Set(
        ps.flatMap((p) => p.requests.flatMap((r) => [...r.prompt, ...r.output])).map((s) => s.seed),
      );
    const tenantSeeds = [...byTenant.values()].map(seedsOf);
    for (let a = 0; a < tenantSeeds.length; a++)
      for (let b = a + 1; b < tenantSeeds.length; b++)
        expect([...tenantSeeds[a]].filter((s) => tenantSeeds[b].has(s))).toEqual([]);
    for (const ps of byTenant.values()) {
      expect(new Set(ps.map((p) => p.requests[0].prompt[0].seed)).size).toBe(1);
      expect(new Set(ps.map((p) => p.requests[0].prompt[1].seed)).size).toBe(2);
      for (const p of ps)
        for (const r of p.requests)
          expect(r.cacheMarker?.tokens).toBe(r.prompt[0].len + r.prompt[1].len);
    }
  });

  it("adds a flood of unrelated single requests only when asked", () => {
    expect(generateWorkload(base).programs.some((p) => p.family === "flood")).toBe(false);
    const w = generateWorkload({ ...base, flood: true });
    const flood = w.programs.filter((p) => p.family === "flood");
    expect(flood.length).toBe(3 * base.programs);
    expect(flood.every((p) => p.requests.length === 1 && p.requests[0].gapKind === "start")).toBe(
      true,
    );
    const seeds = flood.map((p) => p.requests[0].prompt[0].seed);
    expect(new Set(seeds).size).toBe(seeds.length);
    const agentSeeds = new Set(requests(w).flatMap((r) => r.prompt.map((s) => s.seed)));
    expect(seeds.some((s) => agentSeeds.has(s))).toBe(false);
    expect(w.programs.every((p) => p.startS >= 0 && p.startS <= 600)).toBe(true);
    expect(w.meta.flood_requests).toBe(1200);
  });

  it("is deterministic in its seed, and a longer workload keeps the shorter one's programs", () => {
    const a = JSON.stringify(generateWorkload({ ...base, flood: true }));
    expect(JSON.stringify(generateWorkload({ ...base, flood: true }))).toBe(a);
    expect(JSON.stringify(generateWorkload({ ...base, flood: true, seed: 12 }))).not.toBe(a);
    const small = generateWorkload({ ...base, programs: 50 });
    const big = new Map(generateWorkload({ ...base, programs: 51 }).programs.map((p) => [p.id, p]));
    for (const p of small.programs) expect(big.get(p.id)).toEqual(p);
  });

  it("refuses a bad option, naming it, before generating anything", () => {
    const bad: [Partial<GenerateOptions>, RegExp][] = [
      [{ seed: -1 }, /^seed:/],
      [{ programs: 0 }, /^programs:/],
      [{ tenants: 1.5 }, /^tenants:/],
      [{ context: 512 }, /^context:/],
      [{ gaps: "hours" as never }, /^gaps:/],
      [{ flood: "yes" as never }, /^flood:/],
      [{ vocab: 1 }, /^vocab:/],
      [{ arrivalWindowS: -1 }, /^arrivalWindowS:/],
      [{ agentsPerTenant: 0 }, /^agentsPerTenant:/],
      [{ maxTurns: 0 }, /^maxTurns:/],
      [{ floodRequests: -2 }, /^floodRequests:/],
    ];
    for (const [o, msg] of bad) expect(() => generateWorkload({ ...base, ...o })).toThrow(msg);
  });
});

describe("sim workload working set", () => {
  const seg = (seed: number, len: number) => ({ seed, len });
  const req = (prompt: ReturnType<typeof seg>[], out: number, gapS: number): SimRequestSpec => ({
    prompt,
    output: [seg(900 + out, out)],
    reasoningTokens: 0,
    gapS,
    gapKind: gapS ? "tool" : "start",
  });
  const program = (id: string, startS: number, requests: SimRequestSpec[]): SimProgram => ({
    id,
    tenant: "t",
    family: "generated",
    startS,
    requests,
  });

  it("counts a shared prefix once, each program at its peak, and what is live at once", () => {
    const shared = seg(1, 100);
    const w: SimWorkload = {
      name: "w",
      vocab: 1000,
      meta: {},
      programs: [
        // a: 100 shared + 10 own + 5 out, then 100 + 10 + 20 + 5 out at t=10.
        program("a", 0, [
          req([shared, seg(2, 10)], 5, 0),
          req([shared, seg(2, 10), seg(3, 20)], 5, 10),
        ]),
        // b: 100 shared + 50 own + 1 out at t=5 only.
        program("b", 5, [req([shared, seg(4, 50)], 1, 0)]),
        // c: alone, later: 30 + 2 out at t=100.
        program("c", 100, [req([seg(5, 30)], 2, 0)]),
      ],
    };
    const ws = workingSet(w);
    expect(ws.all_tokens).toBe(100 + 35 + 51 + 32);
    // At t=5: a holds 15 own, b 51 own, the prefix once.
    expect(ws.peak_live_tokens).toBe(100 + 15 + 51);
  });

  it("sizes a generated workload's working set above any one program's context", () => {
    const w = generateWorkload(base);
    const ws = workingSet(w);
    const peak = Math.max(
      ...requests(w).map((r) => segmentsLength(r.prompt) + segmentsLength(r.output)),
    );
    expect(ws.peak_live_tokens).toBeGreaterThan(peak);
    expect(ws.all_tokens).toBeGreaterThan(ws.peak_live_tokens);
  });
});
