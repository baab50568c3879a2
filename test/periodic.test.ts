// The gateway's periodic tasks (health checks, Inspect rounds, the replica heartbeat, the expiry
// and idle sweeps) share one helper: a run still going is joined, a failed run is reported and
// the next one runs, stop waits for the run under way, and an interval of 0 never starts.
import { afterEach, describe, expect, it, vi } from "vitest";
import { Periodic } from "../src/gateway/core/periodic.js";

/** A task whose runs end when the test says so. */
function gated() {
  const ends: (() => void)[] = [];
  let runs = 0;
  const task = () =>
    new Promise<void>((resolve) => {
      runs++;
      ends.push(resolve);
    });
  return { task, runs: () => runs, end: () => ends.shift()?.() };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("a periodic task", () => {
  it("joins a run still going instead of starting another", async () => {
    const g = gated();
    const p = new Periodic(g.task, 1000, () => undefined);
    const a = p.run();
    const b = p.run();
    expect(a).toBe(b);
    expect(g.runs()).toBe(1);
    g.end();
    await a;
    const c = p.run();
    expect(c).not.toBe(a);
    expect(g.runs()).toBe(2);
    g.end();
    await c;
  });

  it("hands a failed run to its reporter; the next run goes ahead", async () => {
    const failed: string[] = [];
    let n = 0;
    const p = new Periodic(
      async () => {
        if (++n === 1) throw new Error("first");
      },
      1000,
      (e) => failed.push(e.message),
    );
    await p.run();
    await p.run();
    expect([failed, n]).toEqual([["first"], 2]);
  });

  it("runs on its interval once started, and stop waits for the run under way", async () => {
    vi.useFakeTimers();
    const g = gated();
    const p = new Periodic(g.task, 1000, () => undefined);
    p.start();
    expect(p.started).toBe(true);
    vi.advanceTimersByTime(999);
    expect(g.runs()).toBe(0);
    vi.advanceTimersByTime(1);
    expect(g.runs()).toBe(1);
    // Due again while the first run goes on: joined, not doubled.
    vi.advanceTimersByTime(1000);
    expect(g.runs()).toBe(1);
    let stopped = false;
    const stopping = p.stop().then(() => {
      stopped = true;
    });
    await Promise.resolve();
    expect(stopped).toBe(false);
    g.end();
    await stopping;
    expect(stopped).toBe(true);
    vi.advanceTimersByTime(5000);
    expect([g.runs(), p.started]).toEqual([1, false]);
  });

  it("never starts with an interval of 0 or less", () => {
    vi.useFakeTimers();
    const g = gated();
    for (const ms of [0, -1]) {
      const p = new Periodic(g.task, ms, () => undefined);
      p.start();
      vi.advanceTimersByTime(10_000);
      expect(p.started).toBe(false);
    }
    expect(g.runs()).toBe(0);
  });
});
