// The rate-limited problem log: a million problems make one immediate line and one summary per
// interval, per key; kinds past the cap are folded into "other problems".
import { afterEach, describe, expect, it, vi } from "vitest";
import { RateLimitedLog } from "../src/util/rate-log.js";

afterEach(() => {
  vi.useRealTimers();
});

describe("RateLimitedLog", () => {
  it("writes the first problem at once and folds the rest into one summary per key and interval", () => {
    vi.useFakeTimers();
    const lines: string[] = [];
    const log = new RateLimitedLog({ write: (l) => lines.push(l), intervalMs: 2000 });
    for (let i = 0; i < 1 << 20; i++)
      log.note("w0", "nil event", `seq 1: event ${i}: event is nil`);
    log.note("w1", "gap", "seq 9: gap");
    expect(lines).toEqual(["w0 seq 1: event 0: event is nil", "w1 seq 9: gap"]);
    vi.advanceTimersByTime(1999);
    expect(lines).toHaveLength(2);
    vi.advanceTimersByTime(1);
    expect(lines).toEqual([
      "w0 seq 1: event 0: event is nil",
      "w1 seq 9: gap",
      "w0: 1048575 × nil event in the last 2 s (last: seq 1: event 1048575: event is nil)",
    ]);
    // Quiet for an interval: the next problem is written at once again.
    vi.advanceTimersByTime(5000);
    log.note("w0", "bad batch", "seq 2: truncated");
    expect(lines.at(-1)).toBe("w0 seq 2: truncated");
    expect(log.lines).toBe(4);
  });

  it("caps the kinds it keeps apart and flushes what is pending", () => {
    vi.useFakeTimers();
    const lines: string[] = [];
    const log = new RateLimitedLog({ write: (l) => lines.push(l), intervalMs: 1000, maxKinds: 2 });
    log.note("w0", "a", "first");
    for (const k of ["a", "b", "c", "d", "c"]) log.note("w0", k, `kind ${k}`, 10);
    log.flush();
    expect(lines).toEqual(["w0 first", "w0: 10 × a, 10 × b, 30 × other problems (last: kind c)"]);
    vi.advanceTimersByTime(5000);
    expect(lines).toHaveLength(2);
  });
});
