// The policy's pin budget: a transaction's draft (clone) shares its original's per-worker maps and
// copies one only when it changes it, so nothing a draft does reaches the original; and expire()
// skips its scan until the earliest expiry it holds, dropping every hold exactly when it is due.
import { describe, expect, it } from "vitest";
import { type PinHold, PinBudget } from "../src/policy/pin-budget.js";

const hold = (session: string, expiresAt: number | null, kind: PinHold["kind"] = "marker") => ({
  session,
  kind,
  ttlSeconds: expiresAt === null ? null : 1,
  expiresAt,
});

/** Everything the budget says of each worker (holds by block, counts, lost holds). */
function snapshot(b: PinBudget, workers: string[]) {
  return workers.map((w) => ({
    used: b.used(w),
    a: [...b.holdsOf(w, "a")].map(([h, l]) => [String(h), l.map((p) => p.expiresAt)]),
    b: [...b.holdsOf(w, "b")].map(([h, l]) => [String(h), l.map((p) => p.expiresAt)]),
    lostA: [1n, 2n, 3n].map((h) => b.wasLost(w, "a", h)),
    open: b.open(),
  }));
}

describe("pin budget", () => {
  it("a draft's holds, releases, losses and settles never reach the original", () => {
    const settled: string[] = [];
    const orig = new PinBudget(8, null, (kind, outcome) => settled.push(`${kind}/${outcome}`));
    orig.hold("w0", [1n, 2n], hold("a", 100));
    orig.hold("w1", [3n], hold("b", null));
    orig.served("w0", [1n]);
    orig.expire(10);
    const before = snapshot(orig, ["w0", "w1", "w2"]);

    const d = orig.clone();
    d.hold("w0", [3n], hold("b", 50));
    d.release("w0", [1n, 2n], "a");
    d.lose("w1", 3n, "b", "marker");
    d.hold("w2", [1n], hold("a", 60));
    d.served("w2", [1n]);
    d.keepLostOnly("w0", "a", new Set([1n]));
    d.markFull("w1");
    d.expire(70);
    // The draft saw its own changes...
    expect(d.used("w0")).toBe(0);
    expect(d.used("w1")).toBe(0);
    expect(d.used("w2")).toBe(0);
    expect(d.wasLost("w0", "a", 1n)).toBe(true);
    expect(d.wasLost("w0", "a", 2n)).toBe(false);
    // ...the original none of them, and settled nothing on the draft's account.
    expect(snapshot(orig, ["w0", "w1", "w2"])).toEqual(before);
    expect(settled).toEqual([]);
    expect(orig.admit("w1", [4n])).toBe(1);
  });

  it("expire drops each hold exactly when it is due, whatever was taken or released between", () => {
    const b = new PinBudget(8, null);
    b.hold("w0", [1n], hold("a", 100));
    b.hold("w0", [2n], hold("a", 200));
    b.hold("w0", [3n], hold("a", null));
    b.expire(50);
    expect(b.used("w0")).toBe(3);
    b.expire(100);
    expect(b.used("w0")).toBe(2);
    b.hold("w0", [4n], hold("b", 150)); // earlier than the 200 left: the next scan must see it
    b.expire(149);
    expect(b.used("w0")).toBe(3);
    b.expire(150);
    expect([...b.holdsOf("w0", "b")]).toEqual([]);
    b.release("w0", [2n], "a"); // a lost hold remembered until now + SETTLE_MS
    expect(b.wasLost("w0", "a", 2n)).toBe(true);
    b.expire(150 + 4999);
    expect(b.wasLost("w0", "a", 2n)).toBe(true);
    b.expire(150 + 5000);
    expect(b.wasLost("w0", "a", 2n)).toBe(false);
    b.expire(1e12);
    expect(b.used("w0")).toBe(1); // the hold without a TTL stays
  });

  it("expiring by its heap leaves the view a full scan leaves, through random holds, releases and losses", () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 48271) % 2147483647;
      return seed % n;
    };
    const settled: string[] = [];
    const heap = new PinBudget(64, null, (kind, outcome) => settled.push(`${kind}/${outcome}`));
    // A draft of an empty view owns nothing of it and has no heap: it expires by scanning.
    const scan = new PinBudget(64, null).clone();
    const workers = ["w0", "w1", "w2"];
    let now = 0;
    for (let step = 0; step < 3000; step++) {
      const w = workers[rand(3)];
      const session = rand(2) ? "a" : "b";
      const hashes = Array.from({ length: 1 + rand(3) }, () => BigInt(1 + rand(6)));
      const op = rand(10);
      const h = hold(session, rand(5) ? now + rand(400) : null, rand(2) ? "marker" : "tool");
      for (const b of [heap, scan]) {
        if (op < 4) b.hold(w, hashes, h);
        else if (op < 6) b.release(w, hashes, session);
        else if (op < 7) b.lose(w, hashes[0], session, "marker");
        else if (op < 8) b.served(w, hashes);
        else b.expire(now);
      }
      if (op >= 8) expect(snapshot(heap, workers)).toEqual(snapshot(scan, workers));
      now += rand(60);
    }
    expect(settled.length).toBeGreaterThan(100);
  });

  it("a draft changes only its own copies of shared hold lists, and says what the same steps on the original would", () => {
    let seed = 777;
    const rand = (n: number) => {
      seed = (seed * 48271) % 2147483647;
      return seed % n;
    };
    const workers = ["w0", "w1"];
    const steps = Array.from({ length: 400 }, () => ({
      w: workers[rand(2)],
      session: rand(2) ? "a" : "b",
      hashes: Array.from({ length: 1 + rand(3) }, () => BigInt(1 + rand(5))),
      op: rand(3),
      at: rand(3) ? 1000 + rand(100) : null,
    }));
    const apply = (b: PinBudget, xs: typeof steps) => {
      for (const x of xs) {
        if (x.op === 0) b.hold(x.w, x.hashes, hold(x.session, x.at));
        else if (x.op === 1) b.release(x.w, x.hashes, x.session);
        else b.lose(x.w, x.hashes[0], x.session, "marker");
      }
    };
    const orig = new PinBudget(64, null);
    apply(orig, steps.slice(0, 200));
    const before = snapshot(orig, workers);
    const draft = orig.clone();
    apply(draft, steps.slice(200));
    expect(snapshot(orig, workers)).toEqual(before);
    const ref = new PinBudget(64, null);
    apply(ref, steps);
    expect(snapshot(draft, workers)).toEqual(snapshot(ref, workers));
  });
});
