// bench:agent reads the gateway's retention counters by their names in /metrics: the text here is
// what the gateway's own metric objects render (RetentionMetrics, RadixSessions), so a renamed or
// relabelled counter fails here instead of reading as zero in a bench table.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { parseGatewayMetrics } from "../bench/agent/measure.js";
import { RadixSessions } from "../src/gateway/workers/radix-sessions.js";
import { RetentionMetrics } from "../src/policy/program-retention.js";

describe("bench:agent scrape of the gateway's metrics", () => {
  it("sums retention decisions, outcomes and gaps over workers, and the radix session closes by why", async () => {
    const registry = new Registry();
    const m = new RetentionMetrics(registry);
    const quiet = () => undefined;
    const radix = new RadixSessions({
      workers: () => [],
      registry,
      log: { debug: quiet, info: quiet, warn: quiet, error: quiet },
      timeoutMs: 1000,
    });
    m.decisions.inc({ worker: "w0", action: "keep" }, 3);
    m.decisions.inc({ worker: "w1", action: "keep" }, 2);
    m.decisions.inc({ worker: "w1", action: "let_go" });
    m.outcomes.inc({ worker: "w0", action: "keep", outcome: "hit" }, 4);
    m.gaps.observe({ kind: "predicted" }, 2);
    m.gaps.observe({ kind: "predicted" }, 4);
    m.gaps.observe({ kind: "actual" }, 5);
    radix.releases.inc({ worker: "w0", reason: "let_go", outcome: "ok" }, 7);
    const r = parseGatewayMetrics(await registry.metrics()).retention;
    expect(r.decisions).toEqual({ keep: 5, let_go: 1 });
    expect(r.outcomes).toEqual({ "keep:hit": 4 });
    expect(r.gap_predicted).toEqual({ count: 2, mean_s: 3 });
    expect(r.gap_actual).toEqual({ count: 1, mean_s: 5 });
    expect(r.radix_releases).toEqual({ "let_go:ok": 7 });
  });
});
