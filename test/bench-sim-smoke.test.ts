// npm run bench:sim -- --json --smoke: the fleet-scale bench's own code on 2 workers and a few
// programs exits 0 and ends with its JSON line, every configuration and the oracle in it.
import { expect, it } from "vitest";
import { runBenchSmoke } from "./helpers/bench-smoke.js";

const CONFIGS = ["kvctl", "session_radix", "thunder", "cache_aware", "lru", "dynamo_kv"];
const FIGURES = [
  "recomputed_tokens",
  "prefill_gpu_s",
  "ttft_p50_ms",
  "ttft_p90_ms",
  "goodput_programs_per_h",
];

it("bench:sim --smoke", { timeout: 600_000 }, async () => {
  const r = await runBenchSmoke("sim", 580_000);
  expect(r.code, r.tail).toBe(0);
  const j = r.json as Record<string, any>;
  expect(j.bench).toBe("sim");
  for (const k of ["wall_s", "simulated_s", "workers", "programs", "requests"])
    expect(j[k], k).toBeGreaterThan(0);
  expect(Object.keys(j.configs)).toEqual(CONFIGS);
  for (const c of [...CONFIGS.map((n) => j.configs[n]), j.oracle])
    for (const f of FIGURES) expect(c[f], f).toBeGreaterThan(0);
});

it("bench:sim --map --plan sizes the cells it keeps and refuses an axis value it lacks", {
  timeout: 300_000,
}, async () => {
  const r = await runBenchSmoke("sim", 280_000, ["--map", "--plan", "--floods", "on"]);
  expect(r.code, r.tail).toBe(0);
  const j = r.json as Record<string, any>;
  expect(j.bench).toBe("sim-map-plan");
  expect(j.cells).toHaveLength(1);
  expect(j.cells[0]).toMatchObject({ workers: 2, flood: true, programs: 6 });
  expect(j.requests).toBe(j.cells[0].requests_per_seed[0]);
  const bad = await runBenchSmoke("sim", 280_000, ["--map", "--plan", "--floods", "maybe"]);
  expect(bad.code).toBe(2);
  expect(bad.tail).toContain('--floods: "maybe" is not one of off, on');
});
