// The loss kvctl had in the regime map's tight cells, in miniature: two sessions on one worker
// whose device pool holds only one of them at a time. B's first turn lands on a worker; A's first
// turn shares B's document prefix, so the router sends it there too, and it decodes a long answer.
// B's returning turn then cannot run beside A there: with session affinity alone (cache_aware) it
// waits in that worker's queue until A's whole answer is decoded; under the agent policy's routing
// default (`sessionYieldsWhenFull`) it is prefilled at once on the idle worker.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildPatchedTree } from "../src/demo/harness.js";
import { runSim } from "../src/sim/run.js";
import type { SimProgram, SimRequestSpec, SimWorkload } from "../src/sim/types.js";

const PROFILE = "h100_sxm/llama-3.1-70b";
/** A's answer: 1,500 decode steps of a 70B model, seconds whatever the GPU. */
const A_OUTPUT = 1500;

let tree: ReturnType<typeof buildPatchedTree>;
beforeAll(() => {
  tree = buildPatchedTree();
});
afterAll(() => tree?.remove());

const seg = (seed: number, len: number) => ({ seed, len });
const req = (o: Partial<SimRequestSpec> & Pick<SimRequestSpec, "prompt" | "output">) => ({
  reasoningTokens: 0,
  gapS: 0,
  gapKind: "start" as const,
  ...o,
});

function workload(): SimWorkload {
  const doc = seg(7, 2000);
  const b: SimProgram = {
    id: "b",
    tenant: "t",
    family: "generated",
    startS: 0,
    requests: [
      req({ prompt: [doc, seg(21, 1000)], output: [seg(22, 16)] }),
      req({
        prompt: [doc, seg(21, 1000), seg(22, 16), seg(23, 500)],
        output: [seg(24, 16)],
        gapS: 2,
        gapKind: "tool",
        tool: "search",
      }),
    ],
  };
  const a: SimProgram = {
    id: "a",
    tenant: "t",
    family: "generated",
    startS: 2,
    requests: [req({ prompt: [doc, seg(20, 2000)], output: [seg(25, A_OUTPUT)] })],
  };
  return { name: "session-yield", vocab: 32000, programs: [b, a], meta: {} };
}

describe("a session's returning turn on a worker that cannot hold it now", () => {
  it("waits out the other session's answer under affinity, and is prefilled at once elsewhere under the agent policy", async () => {
    // A (4,000 + 1,500 tokens) and B's returning turn (3,516, of which the 2,000-token document
    // is shared) need 7,016 tokens at once; each worker's device pool holds 6,144.
    const r = await runSim({
      workload: workload(),
      profile: PROFILE,
      workers: 2,
      seed: 1,
      configs: ["kvctl", "cache_aware"],
      pool: { deviceTokens: 6144, hostTokens: 12288 },
      tree: tree.dir,
      parallel: 2,
    });
    const kvctl = r.configs.kvctl;
    const affine = r.configs.cache_aware;
    expect(kvctl.errors).toBe(0);
    expect(affine.errors).toBe(0);
    // B's returning turn is the only one: p90 is its TTFT.
    expect(affine.ttft_by_gap["<10s"]?.n).toBe(1);
    // Under affinity it waited for A's answer: a second at least, at any 70B decode step.
    expect(affine.ttft_p90_ms).toBeGreaterThan(A_OUTPUT * 1);
    // Moved, it pays a 3.5K-token prefill on an idle worker instead.
    expect(kvctl.ttft_p90_ms).toBeLessThan(affine.ttft_p90_ms / 4);
    // And recomputes what it left behind: the move is not free.
    expect(kvctl.recomputed_tokens).toBeGreaterThan(affine.recomputed_tokens);
  }, 300_000);
});
