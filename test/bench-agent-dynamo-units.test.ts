// The Dynamo peers' pieces that need no deployment: the router queue threshold that stands for the
// admission budget, the request dialect Dynamo's frontend takes, and both rows counted as fair
// peers of the verdict (so a Dynamo row that cannot start refuses the verdict by name).
import { describe, expect, it } from "vitest";
import { configSpecs, FAIR_PEERS } from "../bench/agent/configs.js";
import { dynamoDialect, queueThreshold } from "../bench/agent/dynamo-stack.js";
import { judge, summarize } from "../bench/agent/verdict.js";

describe("bench:agent Dynamo peers", () => {
  it("the router queue threshold is the budget's requests of the median prompt over max_num_batched_tokens", () => {
    expect(queueThreshold(2, 2048, 16384)).toBe(0.25);
    expect(queueThreshold(2, 2576, 16384)).toBe(0.3145);
    expect(() => queueThreshold(2, 2048, Number.NaN)).toThrow(/max_num_batched_tokens unknown/);
  });

  it("puts SGLang's regex in Dynamo's guided_regex and drops the fields only SGLang's own frontend reads", () => {
    const body = {
      model: "m",
      regex: "<a>",
      return_cached_tokens_details: true,
      return_output_ids_in_sglext: true,
      stream: true,
    };
    expect(dynamoDialect(body)).toEqual({ model: "m", guided_regex: "<a>", stream: true });
    expect(dynamoDialect({ model: "m" })).toEqual({ model: "m" });
  });

  it("dynamo_kv and dynamo_thunder are fair peers; one that did not run is named and refuses the verdict", () => {
    const specs = configSpecs(2, 2, false);
    expect(FAIR_PEERS(specs)).toEqual(expect.arrayContaining(["dynamo_kv", "dynamo_thunder"]));
    const run = summarize([
      {
        recomputed_tokens: 100,
        prompt_tokens: 1000,
        errors: 0,
        ttft_returning: [1],
        session_completion: [1],
        commands: null,
        ideal_recomputed: 50,
        pin_peak_blocks: null,
        flood_unserved: 0,
      },
    ]);
    const v = judge(
      { kvctl: run, dynamo_kv: run, dynamo_thunder: null },
      { dynamo_thunder: "dynamo-w0 exited (1) before model registration" },
      FAIR_PEERS(specs),
      "thunder",
      50,
    );
    expect(v.valid).toBe(false);
    expect(v.problems).toEqual([
      "dynamo_thunder did not run: dynamo-w0 exited (1) before model registration",
    ]);
  });
});
