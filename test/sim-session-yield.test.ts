// The loss kvctl had in the regime map's tight cells, in miniature: two sessions on one worker
// whose device pool holds only one of them at a time. B's first turn lands on a worker; A's first
// turn shares B's document prefix, so the router sends it there too, and it decodes a long answer.
// B's returning turn then cannot run beside A there: with session affinity alone (cache_aware) it
// waits in that worker's queue until A's whole answer is decoded; under the agent policy's routing
// default (`sessionYieldsWhenFull`) it is prefilled at once on the idle worker. And the other side
// of the rule: where B's returning turn does fit beside A, because the document they share is held
// once on the device, it stays on its worker and recomputes nothing it left behind.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildPatchedTree } from "../src/demo/harness.js";
import { FleetProcesses, runSim } from "../src/sim/run.js";
import type { SimProgram, SimRequestSpec, SimWorkload } from "../src/sim/types.js";

const PROFILE = "h100_sxm/llama-3.1-70b";
/** A's answer in the collision: 1,000 decode steps of a 70B model, seconds whatever the GPU. */
const A_OUTPUT = 1000;

let tree: ReturnType<typeof buildPatchedTree>;
let fleets: FleetProcesses;
beforeAll(() => {
  tree = buildPatchedTree();
  // One set of fleet processes for both runs: starting one costs seconds of imports.
  fleets = new FleetProcesses({ tree: tree.dir });
});
afterAll(async () => {
  await fleets?.close();
  tree?.remove();
});

const seg = (seed: number, len: number) => ({ seed, len });
const req = (o: Partial<SimRequestSpec> & Pick<SimRequestSpec, "prompt" | "output">) => ({
  reasoningTokens: 0,
  gapS: 0,
  gapKind: "start" as const,
  ...o,
});

/** B: a document and a question, then a tool call and its return; A, 2 s in: the same document. */
function workload(s: { doc: number; aOwn: number; aOutput: number }): SimWorkload {
  const doc = seg(7, s.doc);
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
    requests: [req({ prompt: [doc, seg(20, s.aOwn)], output: [seg(25, s.aOutput)] })],
  };
  return { name: "session-yield", vocab: 32000, programs: [b, a], meta: {} };
}

/** kvctl and session affinity alone (cache_aware) on two workers of 6,144 device tokens each. */
async function run(w: SimWorkload) {
  const r = await runSim({
    workload: w,
    profile: PROFILE,
    workers: 2,
    seed: 1,
    configs: ["kvctl", "cache_aware"],
    pool: { deviceTokens: 6144, hostTokens: 12288 },
    tree: tree.dir,
    fleets,
    parallel: 2,
  });
  const kvctl = r.configs.kvctl;
  const affine = r.configs.cache_aware;
  expect(kvctl.errors).toBe(0);
  expect(affine.errors).toBe(0);
  // B's returning turn is the only one: p90 is its TTFT.
  expect(affine.ttft_by_gap["<10s"]?.n).toBe(1);
  return { kvctl, affine };
}

describe("a session's returning turn on a worker that cannot hold it now", () => {
  it("waits out the other session's answer under affinity, and is prefilled at once elsewhere under the agent policy", async () => {
    // A's prompt (5,000 tokens, the 2,000-token document in it) and what B's returning turn
    // (3,516) adds beside it (1,516) are 6,516 tokens at once; each device pool holds 6,144.
    const { kvctl, affine } = await run(workload({ doc: 2000, aOwn: 3000, aOutput: A_OUTPUT }));
    // Under affinity it waited for A's answer: a second at least, at any 70B decode step.
    expect(affine.ttft_p90_ms).toBeGreaterThan(A_OUTPUT * 1);
    // Moved, it pays a 3.5K-token prefill on an idle worker instead.
    expect(kvctl.ttft_p90_ms).toBeLessThan(affine.ttft_p90_ms / 4);
    // And recomputes what it left behind: the move is not free.
    expect(kvctl.recomputed_tokens).toBeGreaterThan(affine.recomputed_tokens);
  }, 300_000);

  it("stays where it fits beside a request in flight because the prefix they share is held once", async () => {
    // A's prompt (4,000, the 2,500-token document in it) and its 300-token answer, and what B's
    // returning turn (4,016) adds beside them (1,516 and its answer): 5,832 tokens, under 6,144.
    // The two prompts counted whole (8,016) would not fit, and the turn would move to the idle
    // worker (A's prompt in flight outweighs B's cached prefix in the cache scoring) and re-prefill.
    const { kvctl, affine } = await run(workload({ doc: 2500, aOwn: 1500, aOutput: 300 }));
    expect(kvctl.recomputed_tokens).toBe(affine.recomputed_tokens);
    expect(kvctl.ttft_p90_ms).toBeLessThanOrEqual(affine.ttft_p90_ms * 1.05);
  }, 300_000);
});
