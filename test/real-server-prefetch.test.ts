// Prefetch, then admit, through a REAL patched SGLang server (CPU, the tiny local model, HiCache host
// tier) and real NATS: a program parked on host (ToolStart offload, or Pause under a lease) is
// brought back to the device by the worker's Prefetch before program admission lets its returning
// request through, and that request is then served from the device with nothing loaded from host
// on its path (SGLang's own cached_tokens_details: device, host). The gate (program-admission.ts),
// the retention recorder and the gateway's Prefetch sender are the gateway's own; the only thing
// not from the gateway is the tool-gap sample that makes the recorder choose park.
import type { NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectControlPlane, ControlPublisher } from "../src/control/index.js";
import { EventRecorder } from "../src/demo/harness.js";
import type { KvEvent } from "../src/events/index.js";
import { lineLog } from "../src/gateway/core/logger.js";
import { GatewayMetrics } from "../src/gateway/telemetry/metrics.js";
import { heldPrefix, prefetchSender } from "../src/gateway/prefetch-send.js";
import { ProgramGate } from "../src/gateway/program-admission.js";
import { blockHashes } from "../src/hash/index.js";
import { applyEvent, InMemoryKvIndex } from "../src/index/index.js";
import { DurationModel } from "../src/policy/duration-model.js";
import { RetentionMetrics, RetentionRecorder } from "../src/policy/program-retention.js";
import { type Ack, type Command, validateCommand } from "../src/protocol/index.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import {
  flood,
  generate,
  type SglangServer,
  startSglangServer,
  tokens,
} from "./helpers/sglang-server.js";

const W = "real-prefetch";
const PAGE = 16;
const DEVICE = 1024; // device tokens; the host tier holds twice that
const FLOOD = { n: 16, each: 256 }; // more fresh tokens than device + host hold together
// As in program-retention.test.ts: a "build" tool's gap is long enough that parking beats keeping.
const COSTS = {
  prefillTokensPerSecond: 4000,
  restoreTokensPerSecond: 40_000,
  deviceHoldCostPerBlockSecond: 0.0001,
  hostHoldCostPerBlockSecond: 0.00001,
  leaseSeconds: 300,
  taus: [1, 2, 5],
};

const hashesOf = (toks: number[]) => Array.from(blockHashes(toks, { pageSize: PAGE }));
function stored(evs: KvEvent[], type: "BlockStored" | "BlockRemoved", tier: string): Set<bigint> {
  const s = new Set<bigint>();
  for (const e of evs)
    if (e.type === type && e.tier === tier) for (const h of e.blockHashes) s.add(h);
  return s;
}
const all = (set: Set<bigint>, hs: bigint[]) => hs.every((h) => set.has(h));

async function count(
  c: { get(): Promise<{ values: { labels: Record<string, unknown>; value: number }[] }> },
  labels: Record<string, string>,
): Promise<number> {
  const v = (await c.get()).values.find((x) =>
    Object.entries(labels).every(([k, val]) => x.labels[k] === val),
  );
  return v?.value ?? 0;
}

describe("real SGLang server: Prefetch, then admit", () => {
  let nats: NatsServer;
  let server: SglangServer;
  let nc: NatsConnection;
  let pub: ControlPublisher;
  let ev: EventRecorder;
  let seed = 1;
  const logs: string[] = [];
  const send = (cmd: Command) => pub.send(W, cmd);
  const inspect = async (hashes: bigint[]) => {
    const a = await send({ type: "Inspect", block_hashes: hashes });
    expect(a.status).toBe("applied");
    return a as Ack & {
      detail: { pool: { commands: { rejected_by_field: Record<string, number> } } };
    };
  };
  const gen = (toks: number[]) => generate(server.baseUrl, toks, 6);
  /**
   * A deadline that has passed before any reply can be read: the gate's deadline timer fires on
   * the microtask queue, its other timers run as the process's. A real 1 ms timer can lose the
   * race, since a process descheduled past the round trip reads the ack before it runs its timers.
   */
  const PASSED = 1;
  const deadlinePassed = {
    setTimeout: (f: () => void, ms: number) =>
      ms === PASSED ? queueMicrotask(f) : setTimeout(f, ms).unref(),
    clearTimeout: (h: unknown) => clearTimeout(h as NodeJS.Timeout),
  };
  /** The gateway's parts for one worker: the gate, its retention (park for "build") and the Prefetch sender. */
  function gateway(deadlineMs: number, chains: Map<string, bigint[]>) {
    const model = new DurationModel({
      priorMeanSeconds: 10,
      minSamples: 4,
      maxSamples: 100,
      maxTools: 8,
    });
    for (const x of [100, 100, 200, 200]) model.record("build", x);
    const metrics = new RetentionMetrics(new Registry());
    const sender = prefetchSender({
      publisher: () => pub,
      worker: W,
      deadlineMs,
      metrics: new GatewayMetrics(),
      log: lineLog((l) => logs.push(l)),
    });
    const rec = new RetentionRecorder({
      worker: W,
      model,
      costs: COSTS,
      pageSize: () => PAGE,
      metrics,
      restore: (id) => sender(chains.get(id) ?? []),
    });
    const gate = new ProgramGate(
      {
        maxPrograms: 4,
        capacityTokens: 100_000,
        pauseAt: 0.95,
        resumeBelow: 0.8,
        holdMs: 60_000,
        prefetchDeadlineMs: deadlineMs,
      },
      rec,
      null,
      deadlineMs === PASSED ? deadlinePassed : undefined,
    );
    return { gate, metrics, sender };
  }

  beforeAll(async () => {
    nats = await startNatsServer();
    server = await startSglangServer({
      natsUrl: nats.url,
      workerId: W,
      pageSize: PAGE,
      maxTotalTokens: DEVICE,
    });
    ev = new EventRecorder(server.info.events_endpoint!, W);
    await ev.start();
    nc = await connectControlPlane({
      servers: nats.url,
      name: "kvctl-real-prefetch",
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

  it("the scheduler's KV events reach the recorder", async () => {
    // the ZMQ subscription joins asynchronously: wait until a request's events arrive
    await expect
      .poll(
        async () => {
          const m = ev.mark();
          await gen(tokens(5000 + seed++, 20));
          return ev.since(m).length;
        },
        { timeout: 60_000, interval: 200 },
      )
      .toBeGreaterThan(0);
  });

  it("a program parked by ToolStart is prefetched before its return is admitted; the return is served from the device", async () => {
    const s = tokens(300, 64);
    const next = [...s, ...tokens(910, 8)];
    const hs = hashesOf(s);
    const chains = new Map([["sess-tool", hs]]);
    const { gate, metrics } = gateway(20_000, chains);
    const first = gate.enter(next.length, "sess-tool");
    await first.ready;
    const fresh = await gen(next);
    expect(fresh.meta_info.cached_tokens).toBe(0);
    first.release(true, ["build"]);
    expect(await count(metrics.decisions, { action: "park" })).toBe(1);
    // parked: the worker's host copy is held, the device copy freed (what the policy's tool rule sends)
    let m = ev.mark();
    const start = await send({ type: "ToolStart", session_id: "sess-tool", block_hashes: hs });
    expect(start.status).toBe("applied");
    await ev.waitFor(m, (e) => all(stored(e, "BlockRemoved", "GPU"), hs), 15_000);
    expect((await inspect(hs)).tiers).toEqual({ CPU_PINNED: 4 });
    await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++); // other programs churn both tiers meanwhile
    expect((await inspect(hs)).tiers).toEqual({ CPU_PINNED: 4 });

    m = ev.mark();
    const back = gate.enter(next.length, "sess-tool");
    expect(back.queued).toBe(true); // it waits for its blocks
    await back.ready;
    expect(await count(metrics.prefetches, { outcome: "resident" })).toBe(1);
    // SGLang's commit_load_back published the device copies before the ack admitted the request
    await ev.waitFor(m, (e) => all(stored(e, "BlockStored", "GPU"), hs), 15_000);
    expect((await inspect(hs)).tiers.GPU).toBe(4);
    const after = await gen(next);
    expect(after.meta_info.cached_tokens).toBe(64);
    // no host -> device load on the returning request's path: all of its prefix was on the device
    expect(after.meta_info.cached_tokens_details).toMatchObject({ device: 64, host: 0 });
    expect(after.output_ids).toEqual(fresh.output_ids);
    back.release(false);
    expect(
      (await send({ type: "ToolEnd", session_id: "sess-tool", epoch: start.epoch! })).status,
    ).toBe("applied");
  });

  it("Prefetch of a Pause-parked session: applied with counts, noop when resident, unknown blocks and bad fields refused and counted", async () => {
    const s = tokens(400, 64);
    const next = [...s, ...tokens(920, 8)];
    const hs = hashesOf(s);
    const fresh = await gen(next);
    const p = await send({
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 600,
      lease_id: "real-prefetch-lease",
    });
    expect(p.status).toBe("applied");
    expect((await inspect(hs)).tiers).toEqual({ CPU_PINNED: 4 });
    // an unknown block refuses the whole command, naming it; nothing is loaded
    const unknown = await send({
      type: "Prefetch",
      block_hashes: [...hs, 1234567890123n],
      deadline_ms: 5000,
    });
    expect(unknown.status).toBe("rejected");
    expect(unknown.reason).toMatch(
      /^command\.block_hashes\[4\]: block 1234567890123 is not held by this worker/,
    );
    // a bad deadline never leaves a conforming router: sent raw, the worker refuses it the same way
    const raw = await nc.request(
      `kv-control-${W}`,
      new TextEncoder().encode(
        `{"type":"Prefetch","block_hashes":[${hs.join(",")}],"deadline_ms":0}`,
      ),
      { timeout: 15_000 },
    );
    expect(JSON.parse(raw.string())).toMatchObject({ status: "rejected", type: "Prefetch" });
    expect(JSON.parse(raw.string()).reason).toMatch(/^deadline_ms: /);
    expect(() =>
      validateCommand({ type: "Prefetch", block_hashes: hs, deadline_ms: 60_001 }),
    ).toThrow(/deadline_ms/);
    const ins = await inspect(hs);
    expect(ins.tiers).toEqual({ CPU_PINNED: 4 });
    // (the subscriber refuses a malformed body before the scheduler sees it, counted in its own metrics)
    expect(ins.detail.pool.commands.rejected_by_field).toMatchObject({
      "command.block_hashes[4]": 1,
    });

    const ok = await send({ type: "Prefetch", block_hashes: hs, deadline_ms: 5000 });
    expect(ok).toMatchObject({
      status: "applied",
      requested: 4,
      affected: 4,
      skipped: 0,
      tiers: { GPU: 4, CPU_PINNED: 4 },
    });
    const again = await send({ type: "Prefetch", block_hashes: hs, deadline_ms: 5000 });
    expect(again).toMatchObject({ status: "noop", affected: 0 });
    const after = await gen(next);
    expect(after.meta_info.cached_tokens_details).toMatchObject({ device: 64, host: 0 });
    expect(after.output_ids).toEqual(fresh.output_ids);
    expect(["applied", "partial"]).toContain(
      (await send({ type: "RevokeLease", lease_id: "real-prefetch-lease" })).status,
    );
  });

  it("a chain the worker holds only in part is prefetched up to its first gap", async () => {
    const s = tokens(450, 64);
    const hs = hashesOf(s);
    await gen([...s, ...tokens(925, 8)]);
    await send({ type: "ToolStart", session_id: "sess-gap", block_hashes: hs });
    const { sender } = gateway(20_000, new Map());
    // the policy's chain runs past what the worker cached (a page it never saw)
    expect(await sender([...hs, ...hashesOf(tokens(460, 80)).slice(4)])).toBe("resident");
    expect((await inspect(hs)).tiers.GPU).toBe(4);
    await send({ type: "ToolEnd", session_id: "sess-gap", epoch: 1 });
  });

  it("with the worker's KV events in an index, a chain held only in part is cut before it is sent, and one held not at all is never sent: nothing refused", async () => {
    const s = tokens(470, 64);
    const hs = hashesOf(s);
    const m = ev.mark();
    await gen([...s, ...tokens(935, 8)]);
    await ev.waitFor(m, (e) => all(stored(e, "BlockStored", "GPU"), hs), 15_000);
    const index = new InMemoryKvIndex();
    for (const e of ev.since(0)) applyEvent(index, W, e);
    const metrics = new GatewayMetrics();
    const sender = prefetchSender({
      publisher: () => pub,
      worker: W,
      deadlineMs: 20_000,
      metrics,
      log: lineLog((l) => logs.push(l)),
      held: (blocks) => heldPrefix(index, W, blocks),
    });
    expect(await sender([...hs, ...hashesOf(tokens(480, 80)).slice(4)])).toBe("resident");
    expect(await sender(hashesOf(tokens(490, 64)))).toBe("failed");
    expect(await count(metrics.commandsSent, { type: "Prefetch" })).toBe(1);
    expect(await count(metrics.commandsAcked, { type: "Prefetch", status: "rejected" })).toBe(0);
  });

  it("a Prefetch that cannot answer inside the admission deadline admits the return at the deadline, counted", async () => {
    const s = tokens(500, 64);
    const hs = hashesOf(s);
    await gen([...s, ...tokens(930, 8)]);
    await send({ type: "ToolStart", session_id: "sess-late", block_hashes: hs });
    const { gate, metrics } = gateway(PASSED, new Map([["sess-late", hs]]));
    gate.enter(72, "sess-late").release(true, ["build"]);
    const back = gate.enter(72, "sess-late");
    await back.ready;
    expect(await count(metrics.prefetches, { outcome: "timeout" })).toBe(1);
    back.release(false);
    expect(["applied", "partial", "noop"]).toContain(
      (await send({ type: "ToolEnd", session_id: "sess-late", epoch: 1 })).status,
    );
  });

  it("a lease that ran out while parked: Prefetch is refused, the return is admitted at once and re-prefilled, never wedged", async () => {
    const s = tokens(600, 64);
    const next = [...s, ...tokens(940, 8)];
    const hs = hashesOf(s);
    const fresh = await gen(next);
    const p = await send({
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 1,
      lease_id: "real-prefetch-short",
    });
    expect(p.status).toBe("applied");
    // past the lease the host copy is ordinary cache: other programs' prompts push it out
    await expect
      .poll(
        async () => {
          await flood(server.baseUrl, FLOOD.n, FLOOD.each, seed++);
          return (await inspect(hs)).missing.length;
        },
        { timeout: 300_000, interval: 1000 },
      )
      .toBe(4);
    const { gate, metrics } = gateway(20_000, new Map([["sess-expired", hs]]));
    gate.enter(72, "sess-expired").release(true, ["build"]);
    const back = gate.enter(72, "sess-expired");
    await back.ready;
    expect(await count(metrics.prefetches, { outcome: "failed" })).toBe(1);
    const after = await gen(next);
    expect(after.meta_info.cached_tokens).toBe(0);
    expect(after.output_ids).toEqual(fresh.output_ids);
    back.release(false);
    expect(
      logs.some((l) =>
        /Prefetch to real-prefetch came back rejected: command\.block_hashes\[0\]/.test(l),
      ),
    ).toBe(true);
  }, 400_000);
});
