// One regime-map cell end to end (8 workers, 0.7x, 8K context, seconds, 16 programs, seed 1): its
// pools hold little more than the largest request, so kvctl's pins and holds fill a worker's
// device pool while a queued request cannot fit. The worker must do what SGLang's scheduler does:
// kvctl's tick frees the oldest pins for the head of the queue (it reads the request's prompt),
// and a worker blocked on memory wakes when kvctl's state next expires, or when a host copy ends,
// never again at a moment already past. Before, this cell never finished (a worker re-ran the same
// moment forever), and then stopped with requests no worker could schedule.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildPatchedTree } from "../src/demo/harness.js";
import { runMap } from "../src/sim/map.js";
import { profileOf } from "../src/sim/run.js";

const PROFILE = "h100_sxm/llama-3.1-70b";
let tree: ReturnType<typeof buildPatchedTree>;

beforeAll(() => {
  tree = buildPatchedTree();
});
afterAll(() => tree?.remove());

describe("a regime-map cell under memory pressure", () => {
  it("finishes every request of every configuration, the device pool loading back from host", async () => {
    const { ref, shape } = await profileOf(PROFILE, tree.dir);
    const r = await runMap(
      {
        axes: {
          workers: [8],
          oversubscription: [0.7],
          context: [8192],
          gaps: ["seconds"],
          flood: [false],
        },
        seeds: [1],
        programsPerCell: 16,
        profile: PROFILE,
        hostRatio: shape.host_kv_tokens / shape.device_kv_tokens,
        pageSize: shape.page_size,
        tree: tree.dir,
        parallel: 2,
      },
      ref,
    );
    expect(r.cells).toHaveLength(1);
    const c = r.cells[0];
    expect(c.programs).toBe(16);
    expect(c.pressure?.h2d_mb_per_program).toBeGreaterThan(0);
    expect(c.pressure?.recomputed_over_oracle).toBeGreaterThanOrEqual(1);
    for (const f of [c.kvctl, c.best_peer, c.oracle]) {
      expect(f.ttft_p90_ms).toBeGreaterThan(0);
      expect(f.gpu_s_per_program).toBeGreaterThan(0);
    }
  }, 600_000);
});
