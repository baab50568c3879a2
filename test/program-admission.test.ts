// Program admission (src/gateway/program-admission.ts): a session admitted keeps its slot through
// its tool loop; under KV pressure whole programs are paused at tool boundaries and resumed with
// hysteresis; no cache command is involved (the gate only orders requests).
import { afterEach, describe, expect, it, vi } from "vitest";
import { ProgramGate, type ProgramLimits } from "../src/gateway/program-admission.js";

const LIMITS: ProgramLimits = {
  maxPrograms: 2,
  capacityTokens: 1000,
  pauseAt: 0.95,
  resumeBelow: 0.8,
  holdMs: 60_000,
};

async function settled(p: Promise<void>): Promise<boolean> {
  let done = false;
  void p.then(() => {
    done = true;
  });
  await Promise.resolve();
  await Promise.resolve();
  return done;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("ProgramGate", () => {
  it("keeps an admitted session's slot through its tool loop: its next request passes a newcomer", async () => {
    const g = new ProgramGate(LIMITS);
    const a = g.enter(100, "a");
    const b = g.enter(100, "b");
    expect(a.queued || b.queued).toBe(false);
    a.release(true); // a's reply was a tool call: it keeps its slot while the tool runs
    const c = g.enter(100, "c");
    expect(c.queued).toBe(true);
    expect(await settled(c.ready)).toBe(false);
    const a2 = g.enter(120, "a"); // a comes back from its tool: no wait, though c is queued
    expect(a2.queued).toBe(false);
    a2.release(false); // a's turn ended: its slot goes to c
    expect(await settled(c.ready)).toBe(true);
    expect(g.holding).toBe(2);
    b.release(false);
    c.release(false);
    expect(g.holding).toBe(0);
  });

  it("request mode would have let the newcomer in: a request without a session holds no slot after it ends", async () => {
    const g = new ProgramGate(LIMITS);
    const a = g.enter(100, null);
    a.release(true);
    expect(g.holding).toBe(0);
    expect(g.enter(100, "x").queued).toBe(false);
  });

  it("pauses the smallest programs at a tool boundary above pauseAt, down to resumeBelow, and resumes them under resumeBelow only", async () => {
    const g = new ProgramGate({ ...LIMITS, maxPrograms: 4 });
    const big = g.enter(500, "big");
    const small = g.enter(200, "small");
    const mid = g.enter(200, "mid");
    expect([big.queued, small.queued, mid.queued]).toEqual([false, false, false]);
    small.release(true);
    mid.release(true);
    big.release(true);
    expect(g.pausedTotal).toBe(0); // 900 <= 0.95 x 1000
    const big2 = g.enter(560, "big"); // its context grew: 960 held
    expect(big2.queued).toBe(false);
    big2.release(true);
    // 960 > 950: the smallest acting program (small, 200) is paused: 760 <= 800.
    expect(g.pausedTotal).toBe(1);
    expect(g.usedTokens).toBe(760);
    const back = g.enter(210, "small");
    expect(back.queued).toBe(true); // 760 + 210 > 800: it waits (hysteresis), though under 950
    expect(await settled(back.ready)).toBe(false);
    const m2 = g.enter(260, "mid");
    expect(m2.queued).toBe(false);
    m2.release(false); // mid's turn ends: 560 held, 560 + 210 <= 800
    expect(await settled(back.ready)).toBe(true);
    back.release(false);
  });

  it("admits a paused program ahead of new programs", async () => {
    const g = new ProgramGate({ ...LIMITS, maxPrograms: 2 });
    const a = g.enter(500, "a");
    const b = g.enter(380, "b");
    b.release(true);
    a.release(true);
    const a2 = g.enter(600, "a");
    a2.release(true); // 980 > 950: b (380) paused, 600 left
    expect(g.pausedTotal).toBe(1);
    const a3 = g.enter(600, "a");
    const fresh = g.enter(100, "fresh");
    const b2 = g.enter(380, "b");
    const c = g.enter(50, "c");
    expect([a3.queued, fresh.queued, b2.queued, c.queued]).toEqual([false, false, true, true]);
    a3.release(false);
    expect(await settled(b2.ready)).toBe(true); // the paused program first
    expect(await settled(c.ready)).toBe(false);
    fresh.release(false);
    expect(await settled(c.ready)).toBe(true);
  });

  it("lets a program's slot go when it does not come back from its tool within holdMs", async () => {
    vi.useFakeTimers();
    const g = new ProgramGate({ ...LIMITS, maxPrograms: 1, holdMs: 1000 });
    g.enter(100, "a").release(true);
    const b = g.enter(100, "b");
    expect(b.queued).toBe(true);
    vi.advanceTimersByTime(999);
    expect(await settled(b.ready)).toBe(false);
    vi.advanceTimersByTime(1);
    expect(await settled(b.ready)).toBe(true);
  });

  it("a waiter that leaves frees its place", async () => {
    const g = new ProgramGate({ ...LIMITS, maxPrograms: 1 });
    const a = g.enter(100, "a");
    const b = g.enter(100, "b");
    const c = g.enter(100, "c");
    b.release();
    expect(g.waiting).toBe(1);
    a.release(false);
    expect(await settled(c.ready)).toBe(true);
  });

  it("refuses thresholds out of order, naming them", () => {
    expect(() => new ProgramGate({ ...LIMITS, pauseAt: 0.7, resumeBelow: 0.8 })).toThrow(
      /resumeBelow < pauseAt/,
    );
  });
});
