// sim:validate's reading of bench:agent's recorded runs and its verdicts (src/sim/validate.ts):
// a run lost to an error (no trace file) is left out of both sides; a cell is within 15% or not;
// a ranking is judged only where bench:agent's medians differ by more than their spread.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { median, rankings, recordedRegimes, rowOf } from "../src/sim/validate.js";

function agentDir(): string {
  const dir = join(mkdtempSync(join(tmpdir(), "kvctl-sim-validate-")), "saturated.seed13");
  const runs = (xs: number[]) => xs.map((recomputed_tokens) => ({ recomputed_tokens }));
  const out = {
    bench: "agent",
    runs: 3,
    admission_requests_per_worker: 2,
    regimes: {
      saturated: {
        device_tokens: 8192,
        l3: true,
        configs: {
          kvctl: { runs: runs([100, 120, 110]), extra: { storage_hit_tokens: 7 } },
          thunder: { runs: runs([200, 210, 190]) },
          cache_aware_adm: { runs: runs([118, 300, 90]) },
        },
      },
    },
  };
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "out.json"), `progress line\n${JSON.stringify(out)}\n`);
  for (const [c, n] of [
    ["kvctl", 3],
    ["thunder", 3],
    ["cache_aware_adm", 2],
  ] as const)
    for (let i = 1; i <= n; i++)
      writeFileSync(join(dir, `t.saturated.${c}.run${i}.requests.jsonl`), "");
  return dir;
}

describe("sim:validate", () => {
  it("reads each configuration's runs that left a trace, and judges cells and rankings", () => {
    const [r] = recordedRegimes(join(agentDir(), ".."));
    expect(r).toMatchObject({
      regime: "saturated",
      seed: "13",
      deviceTokens: 8192,
      l3: true,
      perWorker: 2,
    });
    expect(r.configs.kvctl.real).toEqual([100, 120, 110]);
    expect(r.configs.kvctl.realStorageHit).toBe(7);
    expect(r.configs.cache_aware_adm.real).toEqual([118, 300]);
    expect(r.configs.session_radix).toBeUndefined();
    expect(median([3, 1, 2])).toBe(2);
    expect(median([1, 4])).toBe(2.5);

    const sim = (x: number) => [{ recomputed: x, storageHit: 0 }];
    const kv = rowOf(r, "kvctl", sim(126));
    expect(kv).toMatchObject({
      real_median: 110,
      real_spread: 20,
      ratio: 1.145,
      within_15pct: true,
    });
    const th = rowOf(r, "thunder", sim(100));
    expect(th).toMatchObject({ real_median: 200, within_15pct: false });
    const ca = rowOf(r, "cache_aware_adm", sim(209));
    // kvctl vs thunder differ by 90 > both spreads (20, 20): judged, and the sim disagrees.
    // cache_aware_adm's spread (182) covers every gap: never judged.
    expect(rankings([kv, th, ca])).toEqual([
      { a: "kvctl", b: "thunder", real: "<", sim: ">", agrees: false },
    ]);
  });
});
