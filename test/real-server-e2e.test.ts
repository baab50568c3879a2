// End to end through a REAL patched SGLang server (python -m sglang.launch_server on CPU, the tiny
// local model, HiCache host tier + file L3) on SGLang's default Rust tree core: kvctl accepts
// every command that core carries (python/kvctl_worker/cores.py), all of them over NATS, asserting
// on what SGLang itself reports (cached_tokens / cached_tokens_details of the next request, greedy
// output, the KV events its scheduler publishes) and on Inspect; Think, which needs SGLang's
// Python tree core, is rejected naming why, changing nothing (it runs end to end on the Python
// core in `kvctl demo`). Block hashes come from kvctl's own hash API and must equal the ones
// SGLang's scheduler publishes.
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { NatsConnection } from "@nats-io/transport-node";
import { Publisher, Subscriber } from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectControlPlane, ControlPublisher } from "../src/control/index.js";
import { EventRecorder } from "../src/demo/harness.js";
import { decodeBatch } from "../src/events/decode.js";
import { encodeBatch } from "../src/events/encode.js";
import type { KvEvent } from "../src/events/index.js";
import { freePort } from "../src/util/net.js";
import { blockHashes } from "../src/hash/index.js";
import type { Command } from "../src/protocol/index.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { pollFor } from "./helpers/poll.js";
import { repoRoot } from "./helpers/python.js";
import {
  flood,
  generate,
  randomTokens,
  type SglangServer,
  startSglangServer,
  tokens,
} from "./helpers/sglang-server.js";

const W = "real-e2e";
const PAGE = 16;
const DEVICE = 1024; // device tokens; the host tier holds twice that
// More fresh prompt tokens than device + host hold together.
const FLOOD = { n: 16, each: 256 };

const hashesOf = (toks: number[]) => Array.from(blockHashes(toks, { pageSize: PAGE }));
function tierSet(evs: KvEvent[], type: "BlockStored" | "BlockRemoved", tier: string): Set<bigint> {
  const s = new Set<bigint>();
  for (const e of evs)
    if (e.type === type && e.tier === tier) for (const h of e.blockHashes) s.add(h);
  return s;
}
const all = (set: Set<bigint>, hs: bigint[]) => hs.every((h) => set.has(h));

interface InspectBlock {
  block_hash: bigint | number;
  tiers: string[];
  pin_count: number;
  transient?: boolean;
  lease?: unknown;
}

describe("real SGLang server: kvctl commands over NATS", () => {
  let nats: NatsServer;
  let server: SglangServer;
  let nc: NatsConnection;
  let pub: ControlPublisher;
  let ev: EventRecorder;
  let seed = 1;

  const send = (cmd: Command, opts: { id?: string } = {}) => pub.send(W, cmd, opts);
  const inspect = async (hashes: bigint[], extra: Record<string, unknown> = {}) => {
    const a = await send({ type: "Inspect", block_hashes: hashes, ...extra } as Command);
    expect(a.status).toBe("applied");
    return a as typeof a & {
      detail: {
        blocks: InspectBlock[];
        pool: { sessions: Record<string, number>; in_flight?: Record<string, number> };
      };
    };
  };
  const gen = (toks: number[], n = 6) => generate(server.baseUrl, toks, n);

  beforeAll(async () => {
    nats = await startNatsServer();
    server = await startSglangServer({
      natsUrl: nats.url,
      workerId: W,
      kvctlCommands: "rust",
      pageSize: PAGE,
      maxTotalTokens: DEVICE,
    });
    ev = new EventRecorder(server.info.events_endpoint!, W);
    await ev.start();
    nc = await connectControlPlane({
      servers: nats.url,
      name: "kvctl-real-e2e",
      reconnectTimeWaitMs: 100,
    });
    pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 1, workers: [W] });
  }, 600_000);

  afterAll(async () => {
    await ev?.close();
    await nc?.close();
    await server?.stop();
    await nats?.stop();
  }, 120_000);

  it("the fixture reports the patched server it started, with the kvctl subscriber listening", async () => {
    expect(server.info.server).toBe("sglang 0.5.23");
    expect(server.info.tree_core).toBe("rust");
    expect((await inspect([])).detail).toMatchObject({ tree_core: "rust" });
    expect(server.info.worker_id).toBe(W);
    expect(server.info.events_endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect(server.info.command).toContain("--kv-control-nats-url");
    expect(await readFile(server.info.log_path, "utf8")).toMatch(
      new RegExp(`kvctl subscriber: worker ${W} listening`),
    );
  });

  it("the scheduler's KV events carry exactly the block hashes kvctl computes for the prompt", async () => {
    const p = tokens(0, 64);
    // the ZMQ subscription joins asynchronously: wait until a request's events arrive
    await expect
      .poll(
        async () => {
          const m = ev.mark();
          await gen(tokens(5000 + seed++, 20), 1);
          return ev.since(m).length;
        },
        { timeout: 20_000, interval: 200 },
      )
      .toBeGreaterThan(0);
    const m = ev.mark();
    const r = await gen(p);
    expect(r.meta_info.cached_tokens).toBe(0);
    const evs = await ev.waitFor(
      m,
      (e) => all(tierSet(e, "BlockStored", "GPU"), hashesOf(p)),
      15_000,
    );
    const stored = evs.filter((e) => e.type === "BlockStored" && e.tier === "GPU");
    expect(
      stored.flatMap((e) => (e.type === "BlockStored" ? e.tokenIds : [])).slice(0, 64),
    ).toEqual(p);
    const ins = await inspect(hashesOf(p));
    expect(ins.missing).toEqual([]);
    expect(ins.tiers.GPU).toBe(4);
  });

  it("Cache pin survives a flood of real requests; the unpinned twin does not; duplicate and unknown hashes", async () => {
    const vip = tokens(100, 64);
    const twin = tokens(200, 64);
    const vipFresh = await gen([...vip, ...tokens(900, 8)]);
    const twinFresh = await gen([...twin, ...tokens(900, 8)]);
    const pin = await send(
      { type: "Cache", block_hashes: hashesOf(vip), pin: true, ttl_seconds: 600 },
      { id: "real-pin-1" },
    );
    expect(pin).toMatchObject({
      status: "applied",
      worker_id: W,
      id: "real-pin-1",
      requested: 4,
      affected: 4,
    });
    const dup = await send(
      { type: "Cache", block_hashes: hashesOf(vip), pin: true, ttl_seconds: 600 },
      { id: "real-pin-1" },
    );
    expect(dup.status).toBe("duplicate");
    expect((await inspect(hashesOf(vip))).detail.blocks.map((b) => b.pin_count)).toEqual([
      1, 1, 1, 1,
    ]);
    const unknown = [1234567890123n, -42n];
    const miss = await send({ type: "Cache", block_hashes: unknown, pin: true });
    expect(miss.status).not.toBe("error");
    expect(miss.missing).toEqual(unknown);

    const sent = await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++);
    expect(sent).toBeGreaterThan(3 * DEVICE);
    const v = await gen([...vip, ...tokens(900, 8)]);
    const t = await gen([...twin, ...tokens(900, 8)]);
    expect(v.meta_info.cached_tokens).toBe(64);
    expect(v.output_ids).toEqual(vipFresh.output_ids);
    expect(t.meta_info.cached_tokens).toBe(0);
    expect(t.output_ids).toEqual(twinFresh.output_ids);
    const un = await send({ type: "Cache", block_hashes: hashesOf(vip), pin: false });
    expect(un.status).toBe("applied");
  });

  it("ToolStart/ToolEnd: GPU freed during the tool, restored after; the next request hits device with identical greedy output", async () => {
    const s = tokens(300, 64);
    const next = [...s, ...tokens(910, 8)];
    const fresh = await gen(next);
    expect(fresh.meta_info.cached_tokens).toBe(0);
    const hs = hashesOf(s);
    const m = ev.mark();
    const start = await send({ type: "ToolStart", session_id: "real-tool-1", block_hashes: hs });
    expect(start.status).toBe("applied");
    expect(start.epoch).toBeGreaterThan(0);
    await ev.waitFor(m, (e) => all(tierSet(e, "BlockRemoved", "GPU"), hs), 15_000);
    expect((await inspect(hs, { session_id: "real-tool-1" })).tiers).toEqual({ CPU_PINNED: 4 });
    await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++); // the tool runs; other agents churn both tiers
    expect((await inspect(hs)).tiers).toEqual({ CPU_PINNED: 4 });
    const stale = await send({
      type: "ToolEnd",
      session_id: "real-tool-1",
      epoch: start.epoch! + 1,
    });
    expect(stale.status).toBe("rejected");
    const end = await send({ type: "ToolEnd", session_id: "real-tool-1", epoch: start.epoch! });
    expect(end.status).toBe("applied");
    expect((await inspect(hs)).tiers.GPU).toBe(4);
    const after = await gen(next);
    expect(after.meta_info.cached_tokens).toBe(64);
    expect(after.meta_info.cached_tokens_details).toMatchObject({ device: 64, host: 0 });
    expect(after.output_ids).toEqual(fresh.output_ids);
  });

  it("Pause/resume: the session waits on host through a flood and is served from there with identical greedy output", async () => {
    const s = tokens(400, 64);
    const next = [...s, ...tokens(920, 8)];
    const fresh = await gen(next);
    const hs = hashesOf(s);
    const p = await send({
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 600,
      lease_id: "real-pause",
    });
    expect(p.status).toBe("applied");
    expect(p.lease?.lease_id).toBe("real-pause");
    expect((await inspect(hs)).tiers).toEqual({ CPU_PINNED: 4 });
    await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++);
    const resumed = await gen(next);
    expect(resumed.meta_info.cached_tokens).toBe(64);
    expect(resumed.meta_info.cached_tokens_details).toMatchObject({ device: 0, host: 64 });
    expect(resumed.output_ids).toEqual(fresh.output_ids);
    const renew = await send({ type: "RenewLease", lease_id: "real-pause", new_ttl_seconds: 900 });
    expect(renew.status).toBe("applied");
    const rv = await send({ type: "RevokeLease", lease_id: "real-pause", purge: false });
    expect(rv.status).toBe("applied");
    expect(rv.affected).toBe(4);
    expect((await inspect([], { lease_id: "real-pause" })).lease).toBeNull();
    // the blocks stay to the cache's own eviction: the session is still served from cache
    expect((await gen(next)).meta_info.cached_tokens).toBe(64);
  });

  it("Think needs SGLang's Python tree core: rejected naming the command type, nothing changes; Prune and a purging RevokeLease run on the Rust core", async () => {
    const prefix = tokens(500, 32);
    const old = [...prefix, ...tokens(540, 32)];
    const sfx = tokens(930, 8);
    await gen([...old, ...sfx]);
    const hs = hashesOf(old);
    const before = await inspect(hs);
    expect(before.missing).toEqual([]);
    const m = ev.mark();
    for (const c of [
      { type: "Think", block_hashes: hs.slice(2), transient: true },
      { type: "Think", block_hashes: hs.slice(2), transient: false },
    ] as Command[]) {
      const a = await send(c);
      expect(a.status, c.type).toBe("rejected");
      expect(a.reason, c.type).toMatch(new RegExp(`^command\\.type: ${c.type} is not accepted`));
    }
    const after = await inspect(hs);
    expect(after.missing).toEqual([]);
    expect(after.tiers).toEqual(before.tiers);
    expect(after.detail.blocks.map((b) => b.transient)).toEqual([false, false, false, false]);
    // a context rewrite: what follows the prefix leaves every tier it was on, the prefix stays
    const pr = await send({ type: "Prune", after_block_hash: hs[1] });
    expect(pr.status).toBe("applied");
    expect(pr.affected).toBe(2);
    const pruned = await inspect(hs);
    expect(pruned.missing).toEqual(hs.slice(2));
    const evs = await ev.waitFor(
      m,
      (e) => all(tierSet(e, "BlockRemoved", "GPU"), hs.slice(2)),
      15_000,
    );
    expect(hs.slice(0, 2).filter((h) => tierSet(evs, "BlockRemoved", "GPU").has(h))).toEqual([]);
    expect((await gen([...old, ...sfx])).meta_info.cached_tokens).toBe(32);
    // a lease revoked with purge: its blocks leave the host, nothing else does
    const s = tokens(600, 64);
    await gen(s);
    const ls = hashesOf(s);
    expect(
      (await send({ type: "Pause", block_hashes: ls, ttl_seconds: 600, lease_id: "real-purge" }))
        .status,
    ).toBe("applied");
    // Pause also starts SGLang's asynchronous write of the blocks to L3, which holds them on host
    // until it lands: a purge before then keeps them (a partial ack)
    await pollFor(
      "Pause's storage write to land",
      () => inspect([]),
      (a) => a.detail.pool.in_flight?.backup === 0,
      { detail: (a) => JSON.stringify(a.detail.pool.in_flight) },
    );
    const m2 = ev.mark();
    const rv = await send({ type: "RevokeLease", lease_id: "real-purge" });
    expect(rv.status).toBe("applied");
    expect(rv.affected).toBe(4);
    expect(rv.tiers).toEqual({ CPU_PINNED: 4 });
    expect((await inspect(ls)).missing).toEqual(ls);
    await ev.waitFor(m2, (e) => all(tierSet(e, "BlockRemoved", "CPU_PINNED"), ls), 15_000);
    expect((await inspect(hs.slice(0, 2))).missing).toEqual([]);
  });

  it("a lease expires while idle: the reaper on the scheduler tick releases it with no command sent", async () => {
    const s = tokens(700, 64);
    const hs = hashesOf(s);
    await gen(s);
    const before = (await inspect([])).detail.pool.sessions.leases_expired;
    const p = await send({
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 1,
      lease_id: "real-idle",
    });
    expect(p.status).toBe("applied");
    const expiresAt = p.lease!.expires_at_ms!;
    // No command from here until the flood has evicted the blocks: only the tick can expire the lease.
    await expect
      .poll(() => Date.now(), { timeout: 10_000, interval: 100 })
      .toBeGreaterThan(expiresAt + 500);
    const m = ev.mark();
    await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++);
    await ev.waitFor(m, (e) => all(tierSet(e, "BlockRemoved", "CPU_PINNED"), hs), 15_000);
    const ins = await inspect(hs, { lease_id: "real-idle" });
    expect(ins.lease).toBeNull();
    expect(ins.detail.pool.sessions.leases_expired).toBe(before + 1);
    expect(ins.missing).toEqual(hs);
  });

  it("commands for unknown hashes ack 'missing', never 'error'", async () => {
    const unknown = [777777777777n];
    const cmds: Command[] = [
      { type: "Cache", block_hashes: unknown, pin: false },
      { type: "Pause", block_hashes: unknown, ttl_seconds: 5, lease_id: "real-unknown" },
      { type: "ToolStart", session_id: "real-unknown", block_hashes: unknown },
      { type: "Inspect", block_hashes: unknown },
    ];
    for (const c of cmds) {
      const a = await send(c);
      expect(a.status, c.type).not.toBe("error");
      expect(a.status, c.type).not.toBe("rejected");
      expect(a.missing, c.type).toEqual(unknown);
    }
    await send({ type: "RevokeLease", lease_id: "real-unknown", purge: false });
  });

  it("NATS restarts mid-stream: requests keep being served, the subscriber reconnects, commands apply again", async () => {
    const streaming = flood(server.baseUrl, 12, 64, seed++, 2);
    await nats.restart();
    await streaming; // every request of the stream succeeded across the restart
    await expect
      .poll(
        async () => {
          try {
            return (
              await pub.send(
                W,
                { type: "Inspect", block_hashes: [] },
                { timeoutMs: 2000, retries: 0 },
              )
            ).status;
          } catch {
            return "down";
          }
        },
        { timeout: 30_000, interval: 250 },
      )
      .toBe("applied");
    const s = tokens(800, 32);
    await gen(s);
    const pin = await send({
      type: "Cache",
      block_hashes: hashesOf(s),
      pin: true,
      ttl_seconds: 60,
    });
    expect(pin.status).toBe("applied");
    expect((await send({ type: "Cache", block_hashes: hashesOf(s), pin: false })).status).toBe(
      "applied",
    );
  });

  it("SGLang's /flush_cache keeps pinned blocks while pins are live, and is a plain reset without them", async () => {
    const keep = tokens(850, 32);
    const drop = tokens(880, 32);
    const sfx = tokens(940, 8);
    const keepFresh = await gen([...keep, ...sfx]);
    await gen([...drop, ...sfx]);
    expect(
      (await send({ type: "Cache", block_hashes: hashesOf(keep), pin: true, ttl_seconds: 120 }))
        .status,
    ).toBe("applied");
    const flush = async () =>
      (await fetch(`${server.baseUrl}/flush_cache`, { method: "POST" })).status;
    await expect.poll(flush, { timeout: 30_000, interval: 250 }).toBe(200); // refused while a request is still finishing
    expect((await inspect(hashesOf(keep))).missing).toEqual([]);
    expect((await inspect(hashesOf(drop))).missing).toEqual(hashesOf(drop));
    const after = await gen([...keep, ...sfx]);
    expect(after.meta_info.cached_tokens).toBe(32);
    expect(after.output_ids).toEqual(keepFresh.output_ids);
    expect((await send({ type: "Cache", block_hashes: hashesOf(keep), pin: false })).status).toBe(
      "applied",
    );
    await expect.poll(flush, { timeout: 30_000, interval: 250 }).toBe(200);
    expect((await inspect(hashesOf(keep))).missing).toEqual(hashesOf(keep));
    expect((await gen([...keep, ...sfx])).meta_info.cached_tokens).toBe(0);
  });
  describe("kvctl verify-hashes --zmq against the real server's KV events", () => {
    /** Runs `kvctl verify-hashes --zmq <endpoint> --events N` and drives real requests until it exits. */
    async function verifyOver(
      endpoint: string,
      events: number,
      onLine?: (l: string) => void,
    ): Promise<{ code: number; out: string }> {
      const p = spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          join(repoRoot, "src/cli/bin.ts"),
          "verify-hashes",
          "--zmq",
          endpoint,
          "--events",
          String(events),
        ],
        { cwd: repoRoot },
      );
      const lines: string[] = [];
      createInterface({ input: p.stdout }).on("line", (l) => (lines.push(l), onLine?.(l)));
      let err = "";
      p.stderr.on("data", (d) => (err += d));
      const code = new Promise<number>((r) => p.on("exit", (c) => r(c ?? -1)));
      let exited = false;
      void code.then(() => (exited = true));
      try {
        // Per round a fresh "system prompt" served twice with different continuations: a root
        // store, then a store chained on it (parent != null), plus host write-backs (CPU_PINNED).
        // Rounds continue until verify-hashes has seen its N stores (the first may predate its
        // subscription and leave a child unverifiable; never a mismatch).
        for (let i = 0; !exited && i < 100; i++) {
          const system = randomTokens(90_000 + seed++, 48);
          await gen([...system, ...randomTokens(91_000 + seed, 40)], 2);
          await gen([...system, ...randomTokens(92_000 + seed, 40)], 2);
        }
        return { code: await code, out: `${lines.join("\n")}\n${err}` };
      } finally {
        if (p.exitCode === null) p.kill();
      }
    }

    it("exits 0 over a real workload: every BlockStored SGLang's scheduler published matches kvctl's hashes", async () => {
      const r = await verifyOver(server.info.events_endpoint!, 12);
      expect(r.code, r.out).toBe(0);
      expect(r.out).toMatch(/: match/);
      expect(r.out).toMatch(/verdict: MATCH/);
      expect(r.out).not.toMatch(/MISMATCH/);
      const m = /(\d+) matched, 0 mismatched/.exec(r.out);
      expect(Number(m?.[1]), r.out).toBeGreaterThanOrEqual(8); // of the 12 stores: roots and chained
      expect(r.out).toMatch(/BlockStored \d+ page\(s\) \[-?\d+(, \.\.\.)?\] CPU_PINNED: match/);
    }, 180_000);

    it("exits 1 when a ZMQ proxy corrupts one token of one event in flight", async () => {
      const sub = new Subscriber({ linger: 0 });
      sub.connect(server.info.events_endpoint!);
      sub.subscribe("");
      const out = new Publisher({ linger: 0 });
      const port = await freePort();
      await out.bind(`tcp://127.0.0.1:${port}`);
      let corrupted = 0;
      let armed = false; // only once verify-hashes has matched an event through the proxy (it is subscribed)
      const proxy = (async () => {
        for await (const frames of sub) {
          let payload = frames[2];
          if (armed && corrupted === 0 && frames.length === 3) {
            const { batch } = decodeBatch(payload);
            const e = batch.events.find(
              (x) => x.type === "BlockStored" && x.parentBlockHash === null,
            );
            if (e && e.type === "BlockStored") {
              e.tokenIds[3] = e.tokenIds[3] === 9 ? 10 : 9; // one token of the first page
              payload = encodeBatch(batch);
              corrupted++;
            }
          }
          await out.send([frames[0], frames[1], payload]);
        }
      })().catch(() => undefined);
      try {
        const r = await verifyOver(
          `tcp://127.0.0.1:${port}`,
          30,
          (l) => void (/: match$/.test(l) && (armed = true)),
        );
        expect(corrupted).toBe(1);
        expect(r.code, r.out).toBe(1);
        expect(r.out).toMatch(/MISMATCH at page 0: worker -?\d+, tokens give -?\d+/);
        expect(r.out).toMatch(/verdict: MISMATCH/);
      } finally {
        sub.close();
        out.close();
        await proxy;
      }
    }, 180_000);
  });
});
