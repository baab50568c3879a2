// The request path's counters and histograms (src/gateway/hot-metrics.ts) against prom-client's
// own Counter and Histogram fed the same values: /metrics must not change by a byte, in the text
// format or the JSON form.
import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { HotCounter, HotHistogram } from "../src/gateway/telemetry/hot-metrics.js";

const BUCKETS = [0.005, 0.01, 0.05, 0.1, 1, 5];
// Boundaries (a value equal to a bound belongs to it), below the first, past the last, zero, negative.
const OBSERVED = [0.005, 0.0049, 0.0051, 0.01, 0.3, 1, 5, 5.0001, 120, 0, -1, 0.05, 0.07];
const SERIES = [
  { route: "chat", worker: "w0", tenant: "acme" },
  { route: "generate", worker: 'w"1\\', tenant: "line\nbreak" },
];

function both(): { prom: Registry; hot: Registry } {
  return { prom: new Registry(), hot: new Registry() };
}

describe("hot metrics render exactly as prom-client's", () => {
  it("a counter: the same text and JSON for the same increments", async () => {
    const { prom, hot } = both();
    const cfg = {
      name: "t_requests_total",
      help: "Requests, by route, worker and status",
      labelNames: ["route", "worker", "status"] as const,
    };
    const p = new Counter({ ...cfg, registers: [prom] });
    const h = new HotCounter({ ...cfg, registers: [hot] });
    // A status given as a number and as its text is one series, as prom-client counts it.
    const incs: [{ route: string; worker: string; status: number | string }, number][] = [
      [{ route: "chat", worker: "w0", status: 200 }, 1],
      [{ route: "chat", worker: "w0", status: 200 }, 4],
      [{ route: "chat", worker: 'w"q', status: 502 }, 1],
      [{ route: "messages", worker: "none", status: 403 }, 2.5],
      [{ route: "chat", worker: "w0", status: 200 }, 0],
      [{ route: "chat", worker: "w0", status: "200" }, 3],
      [{ route: "messages", worker: "w0", status: 200 }, 1],
    ];
    for (const [labels, n] of incs) {
      p.inc(labels, n);
      h.inc(labels, n);
    }
    expect(await hot.metrics()).toBe(await prom.metrics());
    expect(await hot.getMetricsAsJSON()).toEqual(await prom.getMetricsAsJSON());
    expect(await hot.metrics()).toContain(
      't_requests_total{route="chat",worker="w0",status="200"} 8',
    );
  });

  it("a histogram: the same buckets, sums and counts, by series", async () => {
    const { prom, hot } = both();
    const cfg = {
      name: "t_latency_seconds",
      help: "Latency",
      labelNames: ["route", "worker", "tenant"] as const,
      buckets: BUCKETS,
    };
    const p = new Histogram({ ...cfg, registers: [prom] });
    const h = new HotHistogram({ ...cfg, registers: [hot] });
    const kept = h.labels(SERIES[0]);
    for (const [i, v] of OBSERVED.entries()) {
      const labels = SERIES[i % 2];
      p.observe(labels, v);
      if (i % 2 === 0) kept.observe(v);
      else h.observe(labels, v);
    }
    const text = await hot.metrics();
    expect(text).toBe(await prom.metrics());
    expect(await hot.getMetricsAsJSON()).toEqual(await prom.getMetricsAsJSON());
    expect(text).toContain('t_latency_seconds_count{route="chat",worker="w0",tenant="acme"} 7');
  });

  it("a reset registry forgets every series, as prom-client's do", async () => {
    const { prom, hot } = both();
    const cfg = {
      name: "t_d_seconds",
      help: "D",
      labelNames: ["route"] as const,
      buckets: BUCKETS,
    };
    const p = new Histogram({ ...cfg, registers: [prom] });
    const h = new HotHistogram({ ...cfg, registers: [hot] });
    p.observe({ route: "chat" }, 0.2);
    h.observe({ route: "chat" }, 0.2);
    prom.resetMetrics();
    hot.resetMetrics();
    expect(await hot.metrics()).toBe(await prom.metrics());
    expect(await hot.metrics()).not.toContain("route=");
  });
});

describe("hot metrics refuse bad input without changing", () => {
  it("names the metric for a shrinking or non-finite count, a non-finite observation, a missing label, unordered buckets", async () => {
    const hot = new Registry();
    const c = new HotCounter({
      name: "t_c_total",
      help: "C",
      labelNames: ["worker"] as const,
      registers: [hot],
    });
    const h = new HotHistogram({
      name: "t_h_seconds",
      help: "H",
      labelNames: ["worker"] as const,
      buckets: BUCKETS,
      registers: [hot],
    });
    c.inc({ worker: "w0" }, 2);
    h.observe({ worker: "w0" }, 0.5);
    const before = await hot.metrics();
    expect(() => c.inc({ worker: "w0" }, -1)).toThrow(/t_c_total.*only grows/);
    expect(() => c.inc({ worker: "w0" }, Number.NaN)).toThrow(/t_c_total/);
    expect(() => c.inc({ worker: "w0" }, Number.POSITIVE_INFINITY)).toThrow(/t_c_total/);
    expect(() => h.observe({ worker: "w0" }, Number.NaN)).toThrow(
      /t_h_seconds: an observation must be finite/,
    );
    expect(() => h.observe({ worker: "new" }, Number.POSITIVE_INFINITY)).toThrow(/t_h_seconds/);
    expect(() => h.labels({ worker: "w0" }).observe(Number.NaN)).toThrow(/t_h_seconds/);
    expect(() => c.inc({} as { worker: string })).toThrow(/t_c_total: label worker is missing/);
    expect(await hot.metrics()).toBe(before);
    expect(
      () =>
        new HotHistogram({
          name: "t_bad",
          help: "B",
          labelNames: [],
          buckets: [1, 0.5],
          registers: [],
        }),
    ).toThrow(/t_bad: buckets must ascend/);
  });
});
