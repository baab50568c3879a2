// The agent policy's admission default, and who decides retention (config.ts, the agent policy's
// programRetention).
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../src/gateway/config/load.js";
import { lineLog } from "../src/gateway/core/logger.js";
import { GatewayMetrics } from "../src/gateway/telemetry/metrics.js";
import { prefetchOutcome, programRetention } from "../src/gateway/prefetch-send.js";
import { InMemoryKvIndex } from "../src/index/index.js";
import { createAgentPolicy } from "../src/policy/agent-policy.js";
import { blankAck } from "../src/protocol/index.js";
import { chainOf, finished, joined, started } from "./helpers/policy-observations.js";

const WORKERS = [{ id: "w0", url: "http://127.0.0.1:1" }];
const LIMITS = { maxRequestsPerWorker: 4, capacityTokensPerWorker: 100_000 };

describe("agent policy defaults", () => {
  it("turns on program admission, with retention, when the admission limits are given and no mode is named", () => {
    const c = parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: LIMITS });
    expect(c.admission.mode).toBe("program");
    expect(c.admission.retention).toBe(true);
  });

  it("keeps a named mode, and per-request admission without a capacity to hold programs to", () => {
    expect(
      parseGatewayConfig({
        workers: WORKERS,
        policy: "agent",
        admission: { ...LIMITS, mode: "request" },
      }).admission.mode,
    ).toBe("request");
    expect(
      parseGatewayConfig({
        workers: WORKERS,
        policy: "agent",
        admission: { maxRequestsPerWorker: 4 },
      }).admission.mode,
    ).toBe("request");
    expect(
      parseGatewayConfig({ workers: WORKERS, policy: "noop", admission: LIMITS }).admission.mode,
    ).toBe("request");
    expect(
      parseGatewayConfig({
        workers: WORKERS,
        policy: "agent",
        admission: { ...LIMITS, retention: false },
      }).admission.retention,
    ).toBe(false);
  });

  it("the agent policy decides retention per worker, priced from its settings", () => {
    const registry = new Registry();
    const p = createAgentPolicy({
      registry,
      config: { retention: { restoreTokensPerSecond: 8000 } },
    });
    const r = p.programRetention?.("w0", () => 16);
    // 4000 tokens: re-prefill 1 s at the default 4000 tokens/s; no samples yet (prior mean).
    const d = r?.decide("s", 4000, ["grep"]);
    expect(d && ["keep", "park", "let_go"].includes(d.action)).toBe(true);
    expect(registry.getSingleMetric("kvctl_program_retention_decisions_total")).toBeDefined();
  });

  it("a parked program's prefetch asks its worker for its session's chain there, and nothing of another worker's", async () => {
    const p = createAgentPolicy({ registry: new Registry() });
    p.observe(joined(1));
    p.observe(started(2, "s"));
    p.observe(finished(3, "s", chainOf(3)));
    const asked: (readonly bigint[])[] = [];
    const send = async (blocks: readonly bigint[]) => {
      asked.push(blocks);
      return "resident" as const;
    };
    expect(await p.programRetention?.("w0", () => 4, send).prefetch?.("s")).toBe("resident");
    expect(asked).toEqual([chainOf(3)]);
    // no chain on w1 (nor for a session it never saw): an empty Prefetch, which the sender answers failed
    await p.programRetention?.("w1", () => 4, send).prefetch?.("s");
    await p.programRetention?.("w0", () => 4, send).prefetch?.("nobody");
    expect(asked.slice(1)).toEqual([[], []]);
    // without a sender there is no prefetch: a parked program re-prefills what it lost
    expect(p.programRetention?.("w0", () => 4).prefetch).toBeUndefined();
  });

  it("the gateway hands each worker's retention its Prefetch sender; with NATS down a prefetch fails at once", async () => {
    const p = createAgentPolicy({ registry: new Registry() });
    p.observe(joined(1));
    p.observe(started(2, "s"));
    p.observe(finished(3, "s", chainOf(3)));
    const config = parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: LIMITS });
    const metrics = new GatewayMetrics();
    // the worker's events say it holds the chain: only NATS being down stops the Prefetch
    const index = new InMemoryKvIndex();
    index.add("w0", "CPU_PINNED", chainOf(3));
    const r = programRetention(
      p,
      config,
      () => null,
      metrics,
      lineLog(() => undefined),
      index,
    )?.("w0", () => 4);
    expect(await r?.prefetch?.("s")).toBe("failed");
    expect(
      programRetention(
        { name: "noop", observe: () => [] },
        config,
        () => null,
        metrics,
        lineLog(() => undefined),
        index,
      ),
    ).toBeNull();
  });

  it("reads a Prefetch ack as resident, partial or failed", () => {
    const a = (status: Parameters<typeof blankAck>[3], skipped = 0) => ({
      ...blankAck("w0", null, "Prefetch", status),
      skipped,
    });
    expect(
      ["applied", "noop", "partial", "rejected", "error"].map((st) =>
        prefetchOutcome(a(st as never)),
      ),
    ).toEqual(["resident", "resident", "partial", "failed", "failed"]);
    expect(prefetchOutcome(a("duplicate"))).toBe("resident");
    expect(prefetchOutcome(a("duplicate", 2))).toBe("partial");
  });

  it("names a bad retention setting", () => {
    expect(() =>
      createAgentPolicy({ config: { retention: { restoreTokensPerSecond: 0 } } }),
    ).toThrow(/restoreTokensPerSecond/);
    expect(() =>
      parseGatewayConfig({
        workers: WORKERS,
        admission: { ...LIMITS, mode: "program", retention: "yes" },
      }),
    ).toThrow(/admission\.retention/);
  });
});
