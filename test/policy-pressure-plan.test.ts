// The idle rule's pressure decision as a function of a snapshot: the same frozen snapshot gives
// the same plan and is left as it was; the watermarks and hysteresis read from it alone.
import { describe, expect, it } from "vitest";
import { type PressureSnapshot, planPressure } from "../src/policy/policies/pressure.js";

const chainOf = (n: number, base: bigint): bigint[] =>
  Array.from({ length: n }, (_, i) => base + BigInt(i));

function deepFreeze<T>(o: T): T {
  if (o && typeof o === "object" && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as object)) deepFreeze(v);
  }
  return o;
}

const session = (
  id: string,
  chain: bigint[],
  extra: Partial<PressureSnapshot["sessions"][number]> = {},
) => ({ id, worker: "w0", chain, paused: false, inFlight: false, offloaded: false, ...extra });

function snapshot(extra: Partial<PressureSnapshot> = {}): PressureSnapshot {
  const shared = chainOf(2, 1n);
  return {
    worker: "w0",
    capBlocks: 20,
    highWatermark: 0.9,
    lowWatermark: 0.6,
    indexedBlocks: null,
    tripped: false,
    sessions: [
      session("a", [...shared, ...chainOf(6, 100n)]),
      session("b", [...shared, ...chainOf(9, 200n)]),
      session("c", [...shared, ...chainOf(3, 300n)], { inFlight: true }),
      session("d", chainOf(4, 400n), { worker: "w1" }),
    ],
    ...extra,
  };
}

describe("pressure plan from a snapshot", () => {
  it("returns the same plan for the same frozen snapshot and does not mutate it", () => {
    const s = deepFreeze(snapshot());
    const before = JSON.stringify(s, (_, v) => (typeof v === "bigint" ? v.toString() : v));
    const p1 = planPressure(s);
    const p2 = planPressure(s);
    expect(p2).toEqual(p1);
    expect(JSON.stringify(s, (_, v) => (typeof v === "bigint" ? v.toString() : v))).toBe(before);
    // 2 shared + 6 + 9 + 3 = 20 blocks on w0 >= 18: the idle ones, most blocks of their own first.
    expect(p1).toMatchObject({ act: true, tripped: true, seen: 20 });
    expect(p1.order).toEqual([
      { session: "b", freed: 9 },
      { session: "a", freed: 6 },
    ]);
  });

  it("hysteresis: between the marks it acts only once tripped; at or under the low mark it clears", () => {
    const between = snapshot({ indexedBlocks: 15, sessions: [session("a", chainOf(15, 1n))] });
    expect(planPressure(deepFreeze({ ...between })).act).toBe(false);
    expect(planPressure(deepFreeze({ ...between, tripped: true }))).toMatchObject({
      act: true,
      tripped: true,
    });
    const low = snapshot({ tripped: true, sessions: [session("a", chainOf(12, 1n))] });
    expect(planPressure(deepFreeze(low))).toMatchObject({ act: false, tripped: false });
    // The worker's KV events count when they show more than this replica's sessions.
    expect(planPressure(deepFreeze(snapshot({ sessions: [], indexedBlocks: 19 })))).toMatchObject({
      act: true,
      seen: 19,
      order: [],
    });
    expect(planPressure(deepFreeze(snapshot({ capBlocks: 0 })))).toMatchObject({
      act: false,
      tripped: false,
    });
  });
});
