// The hold functions on their own: whatever a worker answers, the holds a session record names
// add up, block by block, to the pins the worker holds.
import { describe, expect, it } from "vitest";
import {
  type HoldEnv,
  prepareHold,
  releaseCommands,
  settleHold,
} from "../src/gateway/sessions/holds/holds.js";
import type { PolicyCommand } from "../src/contract/policy.js";
import { newSessionRecord, type SessionRecord } from "../src/gateway/sessions/holds/record.js";
import { Registry } from "prom-client";
import type { KV } from "@nats-io/kv";
import { HoldLedger } from "../src/gateway/sessions/holds/ledger.js";
import { HoldMetrics } from "../src/gateway/sessions/holds/metrics.js";
import { GatewayMetrics } from "../src/gateway/telemetry/metrics.js";
import { SessionStore } from "../src/gateway/sessions/session-store.js";
import { lineLog } from "../src/gateway/core/logger.js";
import { uniform } from "./helpers/random.js";

describe("holds", () => {
  it("the worker's pin counts are the sum of the holds the record names after every step, whatever the acks say", () => {
    const rand = uniform(35);
    const r = newSessionRecord("p", 0);
    // Another session holds one pin on every block: a release must never take it.
    const worker = new Map<string, number>(["1", "2", "3", "4", "5", "6"].map((b) => [b, 1]));
    const seenIds = new Set<string>();
    const unpinOnWorker = (pc: PolicyCommand): string => {
      if (pc.id && seenIds.has(pc.id)) return "duplicate";
      if (pc.id) seenIds.add(pc.id);
      for (const b of (pc.command as { block_hashes: bigint[] }).block_hashes)
        worker.set(String(b), (worker.get(String(b)) ?? 0) - 1);
      return "applied";
    };
    let n = 0;
    const env = (now: number): HoldEnv => ({
      replica: "r1",
      now,
      nextId: () => `h${++n}`,
      incarnation: () => null,
    });
    const blocks = ["1", "2", "3", "4", "5", "6"];
    const kinds = ["marker", "inflight", "tool"] as const;
    // What the worker did for each outcome: applied changed it, rejected did not. A lost ack (failed)
    // is ambiguous: a pin that landed is modelled, and a release that landed or not (the worker
    // remembers the ids it applied and answers a repeat as a duplicate).
    const statuses = ["applied", "applied", "failed", "rejected", "partial"];
    let exchanged = 0;
    for (let step = 0; step < 2000; step++) {
      const kind = kinds[Math.floor(rand() * 3)];
      const pick = blocks.filter(() => rand() < 0.5);
      if (!pick.length) continue;
      const pin = rand() < 0.55;
      const pc: PolicyCommand = {
        worker: "w0",
        sessionId: "p",
        hold: kind,
        reason: "x",
        command: {
          type: "Cache",
          block_hashes: pick.map(BigInt),
          pin,
          ttl_seconds: pin ? 600 : undefined,
        },
      };
      if (rand() < 0.05) {
        const out = releaseCommands(
          r,
          env(step),
          () => true,
          "close",
          (e) => e.doubt,
        );
        for (const x of out) settleHold(r, x.effect, { status: unpinOnWorker(x.pc) }, step);
        // Everything released and acked: the worker holds exactly the other session's pins.
        for (const b of blocks) expect([step, b, worker.get(b)]).toEqual([step, b, 1]);
        expect(r.releases).toEqual([]);
        continue;
      }
      const { pc: sent, effect } = prepareHold(r, pc, env(step));
      if (!sent) continue;
      exchanged++;
      const sentBlocks = (sent.command as { block_hashes: bigint[] }).block_hashes.map(String);
      let status = statuses[Math.floor(rand() * statuses.length)];
      if (!pin && status === "partial") status = "applied";
      const applied =
        status === "partial"
          ? sentBlocks.slice(0, 1)
          : status === "applied" || (status === "failed" && (pin || rand() < 0.5))
            ? sentBlocks
            : [];
      if (!pin && applied.length) unpinOnWorker(sent);
      else for (const b of applied) worker.set(b, (worker.get(b) ?? 0) + 1);
      const missing = status === "partial" ? sentBlocks.slice(1).map(BigInt) : undefined;
      settleHold(r, effect, { status, affected: applied.length, missing, skipped: 0 }, step);
      // The worker holds the other session's pin, every pin the record names, and at most the
      // pins of releases in doubt besides.
      const named = new Map<string, number>();
      const unsure = new Map<string, number>();
      for (const h of r.holds ?? [])
        for (const b of h.blocks) named.set(b, (named.get(b) ?? 0) + 1);
      for (const e of r.releases ?? [])
        if (e.doubt)
          for (const c of e.claims)
            for (const b of c.blocks) unsure.set(b, (unsure.get(b) ?? 0) + 1);
      for (const b of blocks) {
        const n = worker.get(b) ?? 0;
        expect([
          step,
          b,
          n >= 1 + (named.get(b) ?? 0),
          n <= 1 + (named.get(b) ?? 0) + (unsure.get(b) ?? 0),
        ]).toEqual([step, b, true, true]);
      }
    }
    // Not vacuous: most steps sent a command and settled its answer.
    expect(exchanged).toBeGreaterThan(1000);
  });

  const env = (now = 0): HoldEnv => {
    let n = 0;
    return { replica: "r1", now, nextId: () => `h${now}.${++n}`, incarnation: () => null };
  };
  const pin = (blocks: bigint[], hold: "marker" | "inflight" = "marker"): PolicyCommand => ({
    worker: "w0",
    sessionId: "s",
    hold,
    reason: "x",
    command: { type: "Cache", block_hashes: blocks, pin: true, ttl_seconds: 60 },
  });
  const unpin = (blocks: bigint[], hold: "marker" | "inflight" = "marker"): PolicyCommand => ({
    worker: "w0",
    sessionId: "s",
    hold,
    reason: "x",
    command: { type: "Cache", block_hashes: blocks, pin: false },
  });

  it("a partial pin ack narrows the hold to what the worker pinned; an error keeps it in doubt, and close still releases it", () => {
    const r = newSessionRecord("s", 0);
    const a = prepareHold(r, pin([1n, 2n, 3n]), env(1));
    settleHold(r, a.effect, { status: "partial", affected: 1, missing: [2n], skipped: 1 }, 1);
    expect(r.holds?.map((h) => [h.blocks, h.state])).toEqual([[["1"], "held"]]);
    const b = prepareHold(r, pin([7n]), env(2));
    settleHold(r, b.effect, { status: "error" }, 2);
    expect(r.holds?.map((h) => h.state)).toEqual(["held", "doubt"]);
    const out = releaseCommands(r, env(3), () => true, "close");
    expect(out.map((x) => x.pc.command)).toEqual([
      { type: "Cache", block_hashes: [1n, 7n], pin: false },
    ]);
    settleHold(r, out[0].effect, { status: "applied" }, 3);
    expect(r.holds).toEqual([]);
  });

  it("a release naming no hold the record still has is not sent; one the worker rejected gives its blocks back", () => {
    const r = newSessionRecord("s", 0);
    const a = prepareHold(r, pin([1n, 2n], "inflight"), env(1));
    settleHold(r, a.effect, { status: "applied" }, 1);
    const close = releaseCommands(r, env(2), () => true, "close");
    // The turn ends after the close claimed its hold: its own release finds nothing left.
    expect(prepareHold(r, unpin([1n, 2n], "inflight"), env(3)).pc).toBeNull();
    settleHold(r, close[0].effect, { status: "rejected" }, 4);
    expect(r.holds?.map((h) => [h.blocks.sort(), h.state])).toEqual([[["1", "2"], "doubt"]]);
    expect(r.releases).toEqual([]);
    const again = prepareHold(r, unpin([2n, 9n], "inflight"), env(5));
    expect(again.pc?.command).toEqual({ type: "Cache", block_hashes: [2n], pin: false });
  });

  it("a release whose ack was lost is sent again under its own id, so a worker that applied it keeps another session's pin on the block", () => {
    // The worker: pin counts per block, and the ids it has applied (it answers a repeat as a duplicate).
    const counts = new Map<string, number>([["1", 2]]);
    const applied = new Set<string>();
    const apply = (pc: PolicyCommand): string => {
      if (pc.id && applied.has(pc.id)) return "duplicate";
      if (pc.id) applied.add(pc.id);
      for (const b of (pc.command as { block_hashes: bigint[] }).block_hashes)
        counts.set(String(b), (counts.get(String(b)) ?? 0) - 1);
      return "applied";
    };
    // Session s holds one of block 1's two pins (another session holds the other).
    const r = newSessionRecord("s", 0);
    settleHold(r, prepareHold(r, pin([1n]), env(1)).effect, { status: "applied" }, 1);
    const release = prepareHold(r, unpin([1n]), env(2));
    expect(release.pc?.id).toEqual(expect.any(String));
    apply(release.pc as PolicyCommand);
    // The worker unpinned; its ack never came.
    settleHold(r, release.effect, { status: "failed" }, 3);
    expect(r.releases?.map((e) => [e.id, e.doubt])).toEqual([[release.pc?.id, true]]);
    const close = releaseCommands(
      r,
      env(4),
      () => true,
      "close",
      (e) => e.doubt,
    );
    expect(close.map((x) => [x.pc.id, x.pc.command])).toEqual([
      [release.pc?.id, { type: "Cache", block_hashes: [1n], pin: false }],
    ]);
    const status = apply(close[0].pc);
    expect(status).toBe("duplicate");
    settleHold(r, close[0].effect, { status }, 5);
    expect(counts.get("1")).toBe(1);
    expect(r.holds).toEqual([]);
    expect(r.releases).toEqual([]);
  });

  it("a release in doubt past the worker's dedupe window is not sent again: its blocks leave the record unreleased", () => {
    const r = newSessionRecord("s", 0);
    const long: PolicyCommand = {
      ...pin([1n]),
      command: { type: "Cache", block_hashes: [1n], pin: true, ttl_seconds: 86_400 },
    };
    settleHold(r, prepareHold(r, long, env(1)).effect, { status: "applied" }, 1);
    const release = prepareHold(r, unpin([1n]), env(2));
    settleHold(r, release.effect, { status: "failed" }, 3);
    const dropped: string[] = [];
    const late = {
      ...env(2 + 3_600_000),
      dropped: (_h: unknown, why: string) => dropped.push(why),
    };
    expect(
      releaseCommands(
        r,
        late,
        () => true,
        "close",
        () => true,
      ),
    ).toEqual([]);
    expect(dropped).toEqual(["release outcome unknown"]);
    expect(r.holds).toEqual([]);
    expect(r.releases).toEqual([]);
  });

  it("a hold whose record update keeps losing is not sent (counted once per loss, the command reported unsent)", async () => {
    const conflicting = {
      get: async () => ({ operation: "PUT", length: 2, revision: 1, json: () => ({}) }),
      update: async () => {
        throw new Error("wrong last sequence: 1");
      },
      create: async () => {
        throw new Error("wrong last sequence: 1");
      },
    } as unknown as KV;
    const lines: string[] = [];
    const sessions = new SessionStore({
      kv: () => conflicting,
      configured: true,
      opTimeoutMs: 1000,
      metrics: new GatewayMetrics(),
      log: lineLog((l) => lines.push(l)),
    });
    const registry = new Registry();
    const sent: PolicyCommand[] = [];
    const unsent: string[] = [];
    const ledger = new HoldLedger({
      sessions,
      kv: () => null,
      send: (pc) => sent.push(pc),
      unsent: (_pc, why) => unsent.push(why),
      clock: { now: () => 0 },
      metrics: new HoldMetrics(registry),
      log: lineLog((l) => lines.push(l)),
      heartbeatMs: 1000,
      incarnation: () => null,
    });
    ledger.submit(pin([1n]));
    ledger.submit(pin([2n]));
    await ledger.settled();
    // Nothing sent, so no hold exists on the worker that no record names.
    expect(sent).toEqual([]);
    expect(unsent).toEqual([
      expect.stringMatching(/could not be recorded.*8 conflicting writes/),
      expect.stringMatching(/could not be recorded/),
    ]);
    expect(await registry.getSingleMetricAsString("kvctl_gateway_bad_records_total")).toMatch(
      /why="update_lost"} 2/,
    );
    expect(lines.filter((l) => /could not be recorded/.test(l))).toHaveLength(1);
  });

  it("a hold acked error or partial is counted and logged once; it stays named (in doubt) and close releases it", async () => {
    const lines: string[] = [];
    const sessions = new SessionStore({
      kv: () => null,
      configured: false,
      opTimeoutMs: 1000,
      metrics: new GatewayMetrics(),
      log: lineLog((l) => lines.push(l)),
    });
    const registry = new Registry();
    const sent: PolicyCommand[] = [];
    const ledger = new HoldLedger({
      sessions,
      kv: () => null,
      send: (pc) => sent.push(pc),
      unsent: () => undefined,
      clock: { now: () => 0 },
      metrics: new HoldMetrics(registry),
      log: lineLog((l) => lines.push(l)),
      heartbeatMs: 1000,
      incarnation: () => null,
    });
    for (const b of [1n, 2n, 3n]) ledger.submit(pin([b]));
    await ledger.settled();
    expect(sent).toHaveLength(3);
    // As the command recorder does: settled inside the record's update, counted once it is stored.
    const ack = async (pc: PolicyCommand, status: string, more: Record<string, unknown> = {}) => {
      let then: ((stored: SessionRecord) => void) | null = null;
      const stored = await sessions.update("s", (rec) => {
        then = ledger.settleInto(rec, pc, "w0", { status, ...more });
      });
      (then as ((stored: SessionRecord) => void) | null)?.(stored);
    };
    await ack(sent[0], "error");
    await ack(sent[1], "error");
    await ack(sent[2], "partial", { affected: 0, missing: [3n], skipped: 0 });
    expect(lines.filter((l) => /came back error/.test(l))).toHaveLength(1);
    const metric = await registry.getSingleMetricAsString("kvctl_gateway_hold_acks_unsure_total");
    expect(metric).toMatch(/type="Cache",status="error"} 2/);
    expect(metric).toMatch(/type="Cache",status="partial"} 1/);
    // The errors' holds stay named (the worker may hold them); the partial one held nothing.
    const rec = await sessions.get("s");
    expect(rec?.holds?.map((h) => [h.blocks, h.state])).toEqual([
      [["1"], "doubt"],
      [["2"], "doubt"],
    ]);
    await ledger.close("s");
    expect(sent.slice(3).map((pc) => pc.command)).toEqual([
      { type: "Cache", block_hashes: [1n, 2n], pin: false },
    ]);
  });
});
