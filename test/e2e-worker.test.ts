// End to end, real parts only: a real nats-server, the TypeScript ControlPublisher, the Python
// control subscriber inside the worker HARNESS (python -m kvctl_harness from a temp
// copy of the venv's SGLang patched with `kvctl patch apply`), SGLang's real UnifiedRadixCache +
// HiCache (+ file storage) on CPU, and SGLang's own ZMQ KV-event publisher read back with
// src/events' consumer. The harness's own NATS channel (kvctl-harness-{id}) simulates requests.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectControlPlane, ControlPublisher } from "../src/control/index.js";
import {
  buildPatchedTree,
  EventRecorder,
  HarnessClient,
  type HarnessProcess,
  type PatchedTree,
  startHarness,
} from "../src/demo/harness.js";
import type { KvEvent } from "../src/events/index.js";
import { decodeAck } from "../src/protocol/index.js";
import { hasVenv } from "./helpers/python.js";
import { findNatsServer, type NatsServer, startNatsServer } from "./helpers/nats-server.js";

const W = "e2e-w0";
const range = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);

function stored(evs: KvEvent[], tier: string): Set<bigint> {
  const s = new Set<bigint>();
  for (const e of evs)
    if (e.type === "BlockStored" && e.tier === tier) for (const h of e.blockHashes) s.add(h);
  return s;
}
function removed(evs: KvEvent[], tier: string): Set<bigint> {
  const s = new Set<bigint>();
  for (const e of evs)
    if (e.type === "BlockRemoved" && e.tier === tier) for (const h of e.blockHashes) s.add(h);
  return s;
}
const all = (set: Set<bigint>, hs: bigint[]) => hs.every((h) => set.has(h));

describe.skipIf(!hasVenv || !findNatsServer().path)(
  "e2e: ControlPublisher -> NATS -> subscriber -> SGLang cache (worker harness)",
  () => {
    let nats: NatsServer;
    let tree: PatchedTree;
    let storageDir: string;
    let harness: HarnessProcess;
    let nc: NatsConnection;
    let pub: ControlPublisher;
    let h: HarnessClient;
    let ev: EventRecorder;

    const inspect = async (hashes: bigint[], extra: Record<string, unknown> = {}) => {
      const a = await pub.send(W, { type: "Inspect", block_hashes: hashes, ...extra });
      expect(a.status).toBe("applied");
      return a as typeof a & {
        detail: {
          blocks: {
            block_hash: bigint | number;
            tiers: string[];
            pin_count: number;
            transient?: boolean;
            lease?: unknown;
          }[];
        };
      };
    };

    beforeAll(async () => {
      nats = await startNatsServer();
      tree = buildPatchedTree();
      storageDir = mkdtempSync(join(tmpdir(), "kvctl-e2e-storage-"));
      harness = await startHarness({
        tree: tree.dir,
        natsUrl: nats.url,
        workerId: W,
        pageSize: 4,
        deviceTokens: 256,
        hostRatio: 2,
        storageDir,
        tickMs: 20,
      });
      ev = new EventRecorder(harness.ready.events_endpoint, W);
      await ev.start();
      nc = await connectControlPlane({
        servers: nats.url,
        name: "kvctl-e2e",
        reconnectTimeWaitMs: 100,
      });
      pub = new ControlPublisher(nc, { timeoutMs: 10_000, retries: 2, workers: [W] });
      h = new HarnessClient(nc, W);
    });

    afterAll(async () => {
      await h?.shutdown();
      await harness?.stop();
      await ev?.close();
      await nc?.close();
      await nats?.stop();
      tree?.remove();
      if (storageDir) rmSync(storageDir, { recursive: true, force: true });
    });

    it("harness is up: patched tree, storage backend on, KV events flowing", async () => {
      expect(harness.ready.worker_id).toBe(W);
      expect(harness.ready.storage).toBe(true);
      const m = ev.mark();
      const r = await h.serve(range(1, 32));
      expect(r.block_hashes).toHaveLength(8);
      await ev.waitFor(m, (evs) => all(stored(evs, "GPU"), r.block_hashes));
    });

    it("Cache pin/unpin and Inspect; duplicate id acks 'duplicate' with the first outcome", async () => {
      const r = await h.serve(range(100, 16));
      const pin = await pub.send(
        W,
        { type: "Cache", block_hashes: r.block_hashes, pin: true, ttl_seconds: 300 },
        { id: "e2e-pin-1" },
      );
      expect(pin).toMatchObject({
        status: "applied",
        worker_id: W,
        id: "e2e-pin-1",
        requested: 4,
        affected: 4,
      });
      const dup = await pub.send(
        W,
        { type: "Cache", block_hashes: r.block_hashes, pin: true, ttl_seconds: 300 },
        { id: "e2e-pin-1" },
      );
      expect(dup.status).toBe("duplicate");
      expect(dup.affected).toBe(4);
      const ins = await inspect(r.block_hashes);
      expect(ins.tiers.CPU_PINNED).toBe(4); // a pin backs the blocks up to host
      expect(ins.detail.blocks.map((b) => b.pin_count)).toEqual([1, 1, 1, 1]); // the duplicate did not pin again
      const unpin = await pub.send(W, { type: "Cache", block_hashes: r.block_hashes, pin: false });
      expect(unpin.status).toBe("applied");
      const missing = await pub.send(W, { type: "Cache", block_hashes: [123456789n], pin: true });
      expect(missing.missing).toEqual([123456789n]);
    });

    it("bad bodies are rejected naming the field; fire-and-forget is applied and counted; broadcast acks once", async () => {
      const raw = async (body: string) =>
        decodeAck((await nc.request(`kv-control-${W}`, body, { timeout: 5000 })).data);
      const a1 = await raw("{not json");
      expect(a1).toMatchObject({ status: "rejected", worker_id: W, type: null });
      expect(a1.reason).toMatch(/^body/);
      const a2 = await raw(
        JSON.stringify({
          version: 1,
          id: "bad-1",
          issued_at_ms: 1,
          command: { type: "Cache", block_hashes: [1], pin: true, ttl_second: 5 },
        }),
      );
      expect(a2.status).toBe("rejected");
      expect(a2.id).toBe("bad-1");
      expect(a2.reason).toMatch(/ttl_second/);
      const a3 = await raw(
        `{"version":1,"id":"bad-2","issued_at_ms":1,"command":{"type":"Cache","block_hashes":[9223372036854775808123],"pin":true}}`,
      );
      expect(a3.status).toBe("rejected");
      expect(a3.reason).toMatch(/block_hashes\[0\]/);

      const r = await h.serve(range(200, 8));
      const before = ((await h.stats()).subscriber as Record<string, number>).fire_and_forget;
      pub.publish(W, { type: "Cache", block_hashes: r.block_hashes, pin: true });
      await expect
        .poll(async () => (await inspect(r.block_hashes)).detail.blocks.map((b) => b.pin_count), {
          timeout: 5000,
        })
        .toEqual([1, 1]);
      expect(((await h.stats()).subscriber as Record<string, number>).fire_and_forget).toBe(
        before + 1,
      );
      await pub.send(W, { type: "Cache", block_hashes: r.block_hashes, pin: false });

      const b = await pub.broadcast(
        { type: "Inspect", block_hashes: r.block_hashes },
        { deadlineMs: 5000 },
      );
      expect(b.acks.map((x) => x.worker_id)).toEqual([W]);
      expect(b.silent).toEqual([]);
    });

    it("lease expiry while idle: the worker's reaper releases it with no caller", async () => {
      const r = await h.serve(range(300, 16));
      const p = await pub.send(W, {
        type: "Pause",
        block_hashes: r.block_hashes,
        ttl_seconds: 1,
        lease_id: "idle-1",
      });
      expect(p.status).toBe("applied");
      expect(p.lease?.lease_id).toBe("idle-1");
      expect(p.lease?.expires_at_ms).toBeGreaterThan(Date.now() - 1000);
      const ins = await inspect(r.block_hashes, { lease_id: "idle-1" });
      expect(ins.tiers.GPU ?? 0).toBe(0); // demoted: GPU copies freed
      expect(ins.tiers.CPU_PINNED).toBe(4);
      const renewed = await pub.send(W, {
        type: "RenewLease",
        lease_id: "idle-1",
        new_ttl_seconds: 2,
      });
      expect(renewed.status).toBe("applied");
      expect(renewed.lease?.expires_at_ms).toBeGreaterThan(p.lease!.expires_at_ms!);
      const expiredBefore = ((await h.stats()).kvctl as { sessions: Record<string, number> })
        .sessions.leases_expired;
      // no command is sent while idle: only the scheduler loop's reaper can expire it
      await expect
        .poll(
          async () =>
            ((await h.stats()).kvctl as { sessions: Record<string, number> }).sessions
              .leases_expired,
          { timeout: 6000, interval: 200 },
        )
        .toBe(expiredBefore + 1);
      expect((await inspect(r.block_hashes, { lease_id: "idle-1" })).lease).toBeNull();
      const renew = await pub.send(W, {
        type: "RenewLease",
        lease_id: "idle-1",
        new_ttl_seconds: 10,
      });
      expect(renew.status).toBe("rejected");
      expect(renew.reason).toMatch(/lease/);
    });

    it("tool offload then restore: GPU freed, host copy protected, identical KV rows after restore, stale epoch rejected", async () => {
      await h.serve(range(400, 16));
      const r = await h.serve(range(400, 32));
      const before = await h.kv(r.block_hashes);
      expect(before.blocks.every((b) => b.tier === "GPU")).toBe(true);
      const m = ev.mark();
      const start = await pub.send(W, {
        type: "ToolStart",
        session_id: "tool-1",
        block_hashes: r.block_hashes,
      });
      expect(start.status).toBe("applied");
      expect(start.epoch).toBeGreaterThan(0);
      await ev.waitFor(m, (evs) => all(removed(evs, "GPU"), r.block_hashes));
      const off = await inspect(r.block_hashes, { session_id: "tool-1" });
      expect(off.epoch).toBe(start.epoch);
      expect(off.tiers).toEqual({ CPU_PINNED: 8 });
      await h.flood(80, 32, 5); // the tool runs; other traffic churns the GPU and host tiers
      const onHost = await h.kv(r.block_hashes);
      expect(onHost.blocks.map((b) => b.tier)).toEqual(Array(8).fill("CPU_PINNED"));
      const stale = await pub.send(W, {
        type: "ToolEnd",
        session_id: "tool-1",
        epoch: start.epoch! + 1,
      });
      expect(stale.status).toBe("rejected");
      expect(stale.reason).toMatch(/epoch/);
      const m2 = ev.mark();
      const end = await pub.send(W, { type: "ToolEnd", session_id: "tool-1", epoch: start.epoch! });
      expect(end.status).toBe("applied");
      await ev.waitFor(m2, (evs) => all(stored(evs, "GPU"), r.block_hashes));
      const after = await h.kv(r.block_hashes);
      expect(after.blocks.map((b) => b.tier)).toEqual(Array(8).fill("GPU"));
      expect(after.blocks.map((b) => [b.k, b.v])).toEqual(before.blocks.map((b) => [b.k, b.v]));
      const again = await pub.send(W, {
        type: "ToolEnd",
        session_id: "tool-1",
        epoch: start.epoch!,
      });
      expect(again.status).toBe("rejected"); // no offload in flight any more
    });

    it("prune after a context rewrite: the old and new continuations go, the kept prefix stays; in-use skipped", async () => {
      const prefix = range(600, 16);
      await h.serve(prefix);
      const old = await h.serve([...prefix, ...range(700, 16)]);
      const rewritten = await h.serve([...prefix, ...range(800, 16)]);
      const busy = await h.serve([...prefix, ...range(900, 8)], "busy-req"); // a request still running
      const keep = old.block_hashes.slice(0, 4);
      expect(rewritten.block_hashes.slice(0, 4)).toEqual(keep);
      const gone = [...old.block_hashes.slice(4), ...rewritten.block_hashes.slice(4)];
      const m = ev.mark();
      const p = await pub.send(W, { type: "Prune", after_block_hash: keep[3] });
      expect(p.status).toBe("partial");
      expect(p.skipped).toBeGreaterThan(0);
      await ev.waitFor(m, (evs) =>
        all(new Set([...removed(evs, "GPU"), ...removed(evs, "CPU_PINNED")]), gone),
      );
      const ins = await inspect([...keep, ...gone, ...busy.block_hashes.slice(4)]);
      expect(ins.missing).toEqual(gone);
      expect(await h.release("busy-req")).toBe(true);
      const p2 = await pub.send(W, { type: "Prune", after_block_hash: keep[3] });
      expect(p2.status).toBe("applied");
      expect((await inspect(keep)).missing).toEqual([]);
    });

    it("a flood between pause and resume: the session stays on host, comes back whole with identical KV", async () => {
      const session = range(1000, 48);
      const r = await h.serve(session);
      const kvBefore = await h.kv(r.block_hashes);
      const p = await pub.send(W, {
        type: "Pause",
        block_hashes: r.block_hashes,
        ttl_seconds: 120,
        lease_id: "sess-pause",
      });
      expect(p.status).toBe("applied");
      expect((await inspect(r.block_hashes)).tiers).toEqual({ CPU_PINNED: 12 });
      const fl = await h.flood(250, 32, 9);
      expect(fl.tokens).toBeGreaterThan(4 * (256 + 516)); // more than both tiers hold, several times
      const c = await h.cached([...session, ...range(1100, 8)]);
      expect(c.cached_tokens).toBe(48);
      expect(c.host_hit).toBe(48);
      const resumed = await h.serve([...session, ...range(1100, 8)]);
      expect(resumed.loaded_from_host).toBe(48);
      const kvAfter = await h.kv(r.block_hashes);
      expect(kvAfter.blocks.map((b) => b.tier)).toEqual(Array(12).fill("GPU"));
      expect(kvAfter.blocks.map((b) => [b.k, b.v])).toEqual(kvBefore.blocks.map((b) => [b.k, b.v]));
      const m = ev.mark();
      const rv = await pub.send(W, { type: "RevokeLease", lease_id: "sess-pause" });
      expect(rv.status).toBe("applied");
      await ev.waitFor(m, (evs) => all(removed(evs, "CPU_PINNED"), r.block_hashes));
      expect((await inspect(r.block_hashes)).missing).toEqual(r.block_hashes);
    });

    it("Think: transient blocks never reach host; transient=false purges the blocks and their descendants", async () => {
      const base = range(1200, 16);
      const reasoningToks = range(1300, 8);
      await h.serve(base);
      // the reasoning is being generated: it is the tail of the path when the router marks it
      const thought = await h.serve([...base, ...reasoningToks]);
      const reasoning = thought.block_hashes.slice(4, 6);
      const t = await pub.send(W, { type: "Think", block_hashes: reasoning, transient: true });
      expect(t.status).toBe("applied");
      const ins = await inspect(reasoning);
      expect(ins.detail.blocks.every((b) => b.transient === true)).toBe(true);
      // a host copy written through before the mark is taken back (once no storage write holds it)
      await expect
        .poll(async () => (await inspect(reasoning)).tiers.CPU_PINNED ?? 0, {
          timeout: 3000,
          interval: 100,
        })
        .toBe(0);
      await h.flood(60, 32, 13); // pressure: demotion must not write them to host
      expect((await inspect(reasoning)).tiers.CPU_PINNED ?? 0).toBe(0);
      const full = await h.serve([...base, ...reasoningToks, ...range(1400, 8)]); // the answer follows
      const m = ev.mark();
      const purge = await pub.send(W, {
        type: "Think",
        block_hashes: full.block_hashes.slice(4, 6),
        transient: false,
      });
      expect(purge.status).toBe("applied");
      const gone = full.block_hashes.slice(4);
      await ev.waitFor(m, (evs) => all(removed(evs, "GPU"), gone));
      const after = await inspect(full.block_hashes);
      expect(after.missing).toEqual(gone);
      expect(after.tiers.GPU).toBe(4); // the base stays
    });

    it("Warm: pages come back from the file storage backend into host memory and the tree", async () => {
      const toks = range(1400, 32);
      const r = await h.serve(toks);
      expect(r.storage_keys).toHaveLength(8);
      const p = await pub.send(W, {
        type: "Pause",
        block_hashes: r.block_hashes,
        ttl_seconds: 60,
        lease_id: "warm-1",
      });
      expect(p.status).toBe("applied"); // Pause writes through to storage when it is configured
      const rv = await pub.send(W, { type: "RevokeLease", lease_id: "warm-1" });
      // partial while the storage write-back still holds the host copy; purge once it is done
      expect(["applied", "partial"]).toContain(rv.status);
      await expect
        .poll(
          async () => {
            await pub.send(W, {
              type: "Think",
              block_hashes: r.block_hashes.slice(0, 1),
              transient: false,
            });
            return (await inspect(r.block_hashes)).missing.length;
          },
          { timeout: 10_000, interval: 200 },
        )
        .toBe(8);
      const noTokens = await pub.send(W, {
        type: "Warm",
        block_keys: ["a".repeat(64)],
        target_tier: "CPU_TIER1",
      });
      expect(noTokens.status).toBe("rejected");
      const m = ev.mark();
      const w = await pub.send(W, {
        type: "Warm",
        block_keys: r.storage_keys,
        token_ids: toks,
        target_tier: "CPU_TIER1",
      });
      expect(w.status).toBe("applied");
      await ev.waitFor(m, (evs) => all(stored(evs, "CPU_PINNED"), r.block_hashes));
      expect((await inspect(r.block_hashes)).tiers.CPU_PINNED).toBe(8);
      const c = await h.cached(toks);
      expect(c.host_hit).toBe(32);
      const served = await h.serve(toks);
      expect(served.loaded_from_host).toBe(32);
      const kv = await h.kv(r.block_hashes);
      expect(kv.blocks[0].k[0].slice(0, 4)).toEqual([1400, 1400, 1400, 1400]); // layer 0 K row of token 1400
    });

    it("broadcast reaches every worker once and names the silent ones", async () => {
      const w1 = await startHarness({
        tree: tree.dir,
        natsUrl: nats.url,
        workerId: "e2e-w1",
        pageSize: 4,
        deviceTokens: 128,
        hostRatio: 2,
      });
      try {
        const h1 = new HarnessClient(nc, "e2e-w1");
        const r0 = await h.serve(range(1500, 8));
        await h1.serve(range(1500, 8)); // the same tokens: the same block hashes on both workers
        const b = await pub.broadcast(
          { type: "Cache", block_hashes: r0.block_hashes, pin: true, ttl_seconds: 60 },
          { deadlineMs: 3000, workers: [W, "e2e-w1", "e2e-ghost"] },
        );
        expect(b.acks.map((a) => a.worker_id).sort()).toEqual([W, "e2e-w1"]);
        expect(b.acks.every((a) => a.status === "applied" && a.id === b.id)).toBe(true);
        expect(b.silent).toEqual(["e2e-ghost"]);
        const un = await pub.broadcast(
          { type: "Cache", block_hashes: r0.block_hashes, pin: false },
          { deadlineMs: 3000, workers: [W, "e2e-w1"] },
        );
        expect(un.acks.map((a) => a.status)).toEqual(["applied", "applied"]);
        expect(un.silent).toEqual([]);
        await h1.shutdown();
      } finally {
        await w1.stop();
      }
    });

    it("the subscriber reconnects after a NATS restart", async () => {
      await nats.restart();
      await expect
        .poll(
          async () => {
            try {
              return (
                await pub.send(
                  W,
                  { type: "Inspect", block_hashes: [] },
                  { timeoutMs: 1000, retries: 0 },
                )
              ).status;
            } catch {
              return "down";
            }
          },
          { timeout: 20_000, interval: 250 },
        )
        .toBe("applied");
      const st = await h.stats();
      expect((st.subscriber as Record<string, number>).reconnects).toBeGreaterThanOrEqual(1);
    });
  },
);
