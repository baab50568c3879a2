// The reference worker model (the test stand-in's state): TTL pins and leases expire on their own,
// the dedupe window forgets old ids, the pin budget yields `partial`. No NATS needed.
import { describe, expect, it } from "vitest";
import { ReferenceWorkerModel } from "../src/testing/index.js";

function model(extra: ConstructorParameters<typeof ReferenceWorkerModel>[0] = {}) {
  let now = 1_000_000;
  const m = new ReferenceWorkerModel({ now: () => now, ...extra });
  m.addPath([1n, 2n, 3n, 4n]);
  return { m, advance: (ms: number) => (now += ms) };
}

describe("ReferenceWorkerModel", () => {
  it("TTL pins expire by themselves; untimed pins stay", () => {
    const { m, advance } = model();
    m.apply("w", "a", { type: "Cache", block_hashes: [1n, 2n], pin: true, ttl_seconds: 10 });
    m.apply("w", "b", { type: "Cache", block_hashes: [2n], pin: true });
    expect(m.blocks.get(2n)!.pins).toBe(2);
    advance(10_001);
    m.apply("w", "c", { type: "Inspect" });
    expect(m.blocks.get(1n)!.pins).toBe(0);
    expect(m.blocks.get(2n)!.pins).toBe(1);
  });

  it("leases expire by themselves, then renewing one is rejected", () => {
    const { m, advance } = model();
    expect(
      m.apply("w", "p", { type: "Pause", block_hashes: [1n], ttl_seconds: 5, lease_id: "l" }).lease,
    ).toEqual({ lease_id: "l", expires_at_ms: 1_005_000 });
    advance(5_000);
    expect(
      m.apply("w", "r", { type: "RenewLease", lease_id: "l", new_ttl_seconds: 5 }).status,
    ).toBe("rejected");
  });

  it("the pin budget turns a pin into `partial` with a reason", () => {
    const { m } = model({ pinBudgetBlocks: 2 });
    const ack = m.apply("w", "a", { type: "Cache", block_hashes: [1n, 2n, 3n], pin: true });
    expect(ack).toMatchObject({
      status: "partial",
      affected: 2,
      skipped: 1,
      reason: "pin budget exhausted (2/2 blocks)",
    });
  });

  it("Prune skips pinned descendants unless forced, and keeps the block itself", () => {
    const { m } = model();
    m.apply("w", "a", { type: "Cache", block_hashes: [3n], pin: true });
    // 4 goes; 3 is pinned, and 2 stays as its parent.
    expect(m.apply("w", "b", { type: "Prune", after_block_hash: 1n })).toMatchObject({
      status: "partial",
      requested: 3,
      affected: 1,
      skipped: 2,
    });
    expect(m.apply("w", "c", { type: "Prune", after_block_hash: 1n, force: true })).toMatchObject({
      status: "applied",
      requested: 2,
      affected: 2,
    });
    expect([...m.blocks.keys()]).toEqual([1n]);
  });

  it("the dedupe window forgets ids past its size and its age", () => {
    const { m, advance } = model({ dedupeMaxIds: 3, dedupeWindowMs: 1000 });
    for (const id of ["a", "b", "c", "d"]) m.apply("w", id, { type: "Inspect" });
    expect(m.seen("a")).toBeUndefined();
    expect(m.seen("d")?.status).toBe("applied");
    advance(1001);
    expect(m.seen("d")).toBeUndefined();
  });
});
