// Pin priorities and preemption (src/policy/pin-priority.ts): exact plans for given holds.
import { describe, expect, it } from "vitest";
import { type HoldGroup, planPin, type PinWant } from "../src/policy/pin-priority.js";

const NO_CAPS = { perSession: null, perTenant: null };
const g = (
  session: string,
  kind: HoldGroup["kind"],
  freed: number,
  expectedReturnAt: number | null = null,
  tenant: string | null = null,
): HoldGroup => ({ session, tenant, kind, freed, expectedReturnAt });
const want = (
  kind: PinWant["kind"],
  blocks: number,
  expectedReturnAt: number | null = null,
  session = "me",
  tenant: string | null = "t1",
): PinWant => ({ session, tenant, kind, blocks, expectedReturnAt });

describe("planPin", () => {
  it("grants what fits without preempting anything", () => {
    expect(
      planPin([g("m", "marker", 10)], want("lease", 5), 5, NO_CAPS, { session: 0, tenant: 0 }),
    ).toEqual({ grant: true, preempt: [] });
  });

  it("a parked program preempts markers before any lease, and leases expected back later than itself", () => {
    const groups = [
      g("soon", "lease", 8, 1000),
      g("late", "lease", 8, 9000),
      g("m1", "marker", 3),
      g("m2", "marker", 4),
      g("run", "inflight", 50),
    ];
    const plan = planPin(groups, want("lease", 12, 5000), 2, NO_CAPS, { session: 0, tenant: 0 });
    // need 10: markers first, larger first (m2 4, m1 3), then the lease back last (late 8); never soon or run.
    expect(plan).toEqual({ grant: true, preempt: [groups[3], groups[2], groups[1]] });
  });

  it("an admitted program's working set preempts parked programs; a marker preempts nothing", () => {
    const groups = [g("p", "lease", 20, 100), g("m", "marker", 5)];
    expect(planPin(groups, want("tool", 22), 0, NO_CAPS, { session: 0, tenant: 0 })).toEqual({
      grant: true,
      preempt: [groups[1], groups[0]],
    });
    expect(planPin(groups, want("marker", 1), 0, NO_CAPS, { session: 0, tenant: 0 })).toEqual({
      grant: false,
      refused: "budget",
      preempt: [],
    });
  });

  it("preempts nothing when the lower holds cannot make room (nothing half-applied)", () => {
    const groups = [g("m", "marker", 3), g("run", "tool", 100)];
    expect(planPin(groups, want("lease", 10, 0), 2, NO_CAPS, { session: 0, tenant: 0 })).toEqual({
      grant: false,
      refused: "budget",
      preempt: [],
    });
  });

  it("never preempts the session's own holds, and holds its caps before the budget", () => {
    expect(
      planPin([g("me", "marker", 50)], want("tool", 10), 0, NO_CAPS, { session: 0, tenant: 0 }),
    ).toMatchObject({ grant: false, refused: "budget" });
    const free = [g("m", "marker", 100)];
    expect(
      planPin(
        free,
        want("tool", 10),
        100,
        { perSession: 20, perTenant: null },
        { session: 11, tenant: 0 },
      ),
    ).toEqual({ grant: false, refused: "session_cap", preempt: [] });
    expect(
      planPin(
        free,
        want("tool", 10),
        100,
        { perSession: 20, perTenant: 30 },
        { session: 10, tenant: 21 },
      ),
    ).toEqual({ grant: false, refused: "tenant_cap", preempt: [] });
    expect(
      planPin(
        free,
        want("tool", 10),
        100,
        { perSession: 20, perTenant: 30 },
        { session: 10, tenant: 20 },
      ),
    ).toEqual({ grant: true, preempt: [] });
  });
});
