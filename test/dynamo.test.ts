// kvctl with NVIDIA Dynamo 1.6.1, all real on CPU: Dynamo's frontend (KV router) over two patched
// SGLang workers started through `python -m kvctl_worker.dynamo`, a real nats-server for kvctl's
// control plane, and Dynamo's own ZMQ event plane read by kvctl's Dynamo adapter into the index.
// Commands go to the workers by kvctl worker id (one given explicitly, one taken from Dynamo's
// worker id); each is checked through the frontend (cached_tokens) and the events Dynamo relays.
// Then the entry point without kvctl flags against stock `python -m dynamo.sglang`: same greedy
// output, same KV events. The fleet is started once.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Publisher, Subscriber } from "zeromq";
import { connectControlPlane, ControlPublisher } from "../src/control/index.js";
import { decodeBatch } from "../src/events/decode.js";
import { encodeBatch } from "../src/events/encode.js";
import { buildPatchedTree, type PatchedTree } from "../src/demo/harness.js";
import { DynamoEventAdapter, type DynamoProblem } from "../src/events/dynamo/adapter.js";
import { decodeDynamoMessage, type DynamoRecord } from "../src/events/dynamo/decode.js";
import { readDynamoDiscovery } from "../src/events/dynamo/discovery.js";
import { DynamoEventSubscriber } from "../src/events/dynamo/subscriber.js";
import { dynamoBlockHashes, dynamoSequenceHashes } from "../src/hash/dynamo.js";
import { blockHashes, storageKeys } from "../src/hash/index.js";
import { indexSink, InMemoryKvIndex } from "../src/index/index.js";
import { packageRoot } from "../src/paths.js";
import {
  complete,
  type DynamoFrontend,
  type DynamoWorker,
  dynamoInstalled,
  tinyModel,
  startDynamoFrontend,
  startDynamoWorker,
} from "./helpers/dynamo.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { randomTokens, tokens } from "./helpers/sglang-server.js";
import { freePort } from "../src/util/net.js";

const PAGE = 16;
const EXPLICIT = "dyn-a";
const hashesOf = (t: number[]) => Array.from(blockHashes(t, { pageSize: PAGE }));

if (!dynamoInstalled()) {
  // python/setup_venv.sh installs Dynamo; `npm test` runs it first, so this only fires when someone opted out.
  throw new Error("Dynamo is not installed: run python/setup_venv.sh (KVCTL_DYNAMO=0 skips it)");
}

describe("Dynamo fleet: frontend (KV router) + two patched workers under kvctl_worker.dynamo + nats-server", () => {
  let dir: string;
  let tree: PatchedTree;
  let nats: NatsServer;
  let a: DynamoWorker;
  let b: DynamoWorker;
  let fe: DynamoFrontend;
  let nc: NatsConnection;
  let pub: ControlPublisher;
  let sub: DynamoEventSubscriber;
  const index = new InMemoryKvIndex();
  const records: { r: DynamoRecord; worker: string }[] = [];
  const problems: DynamoProblem[] = [];
  let kvA: string;
  let kvB: string;
  /** Dynamo's event-plane PUB of worker a (it binds every interface; loopback reaches it). */
  let dynamoEventsA: string;
  let discovery: string;
  let l3: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "kvctl-dynamo-"));
    discovery = join(dir, "discovery");
    l3 = join(dir, "l3");
    mkdirSync(l3);
    const model = tinyModel();
    tree = buildPatchedTree();
    nats = await startNatsServer();
    const common = {
      entry: "kvctl" as const,
      tree: tree.dir,
      model,
      discovery,
      natsUrl: nats.url,
      pageSize: PAGE,
      extraArgs: ["--hicache-storage-backend", "file"],
    };
    process.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR = l3;
    [a, b] = await Promise.all([
      startDynamoWorker({ ...common, name: "worker-a", dir: join(dir, "a"), workerId: EXPLICIT }),
      startDynamoWorker({ ...common, name: "worker-b", dir: join(dir, "b") }),
    ]);
    fe = await startDynamoFrontend({
      name: "frontend",
      discovery,
      dir: join(dir, "fe"),
      routerMode: "kv",
    });
    // Worker a was given its kvctl id and logs the pair; worker b's kvctl id is its Dynamo id.
    expect(a.log()).toContain(`kvctl: Dynamo worker ${a.dynamoId} is kvctl worker ${EXPLICIT}`);
    expect(b.log()).toContain(`kvctl: Dynamo worker ${b.dynamoId} is kvctl worker ${b.dynamoId}`);
    kvA = EXPLICIT;
    kvB = b.dynamoId;
    const found = readDynamoDiscovery(discovery);
    expect(found.channels).toHaveLength(2);
    expect(found.blockSizes).toEqual({ [a.dynamoId]: PAGE, [b.dynamoId]: PAGE });
    const chA = found.channels.find((c) => c.worker === a.dynamoId);
    expect(chA).toBeDefined();
    dynamoEventsA = chA!.endpoint.replace(/\/\/[^:]+:/, "//127.0.0.1:");
    const adapter = new DynamoEventAdapter({
      workers: { [a.dynamoId]: { worker: kvA, blockSize: found.blockSizes[a.dynamoId] } },
      identity: true,
      blockSize: found.blockSizes[b.dynamoId],
      sink: indexSink(index),
    });
    adapter.on("record", (r: DynamoRecord, worker: string) => records.push({ r, worker }));
    adapter.on("problem", (p: DynamoProblem) => problems.push(p));
    sub = new DynamoEventSubscriber(
      adapter,
      found.channels.map((c) => c.endpoint),
    ).start();
    nc = await connectControlPlane({
      servers: nats.url,
      name: "kvctl-dynamo-fleet",
      reconnectTimeWaitMs: 100,
    });
    pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 1, workers: [kvA, kvB] });
  }, 900_000);

  afterAll(async () => {
    await sub?.close();
    await nc?.close();
    await Promise.all([fe?.stop(), a?.stop(), b?.stop()]);
    await nats?.stop();
    tree?.remove();
    delete process.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR;
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 180_000);

  /** The kvctl worker whose relayed events hold all of `hs` on `tier`, once one does. */
  async function holder(hs: bigint[], tier = "GPU"): Promise<string> {
    let who: string | undefined;
    await expect
      .poll(
        () => {
          const infos = hs.map((h) => index.lookup(h));
          who = [kvA, kvB].find((w) =>
            infos.every((i) => i?.residency.get(w)?.includes(tier as never)),
          );
          return who;
        },
        { timeout: 60_000, interval: 100 },
      )
      .toBeDefined();
    return who!;
  }

  it("relayed events: block_hash is kvctl's SGLang chain and tokens_hash kvctl's Dynamo hash of the same tokens", async () => {
    const p = tokens(10, 64);
    const first = await complete(fe.baseUrl, p);
    expect(first.cachedTokens).toBe(0);
    const hs = hashesOf(p);
    const w = await holder(hs);
    const local = Array.from(dynamoBlockHashes(p, { blockSize: PAGE }));
    const stored = records.filter(
      (x) => x.worker === w && x.r.data.kind === "stored" && x.r.tier === "GPU",
    );
    const pairs = stored.flatMap((x) => (x.r.data.kind === "stored" ? x.r.data.blocks : []));
    for (let i = 0; i < hs.length; i++) {
      const blk = pairs.find((b) => b.blockHash === hs[i]);
      expect(blk, `page ${i} relayed`).toBeDefined();
      expect(blk!.tokensHash).toBe(local[i]);
    }
    // tokens_hash is the per-block hash, not the sequence hash (they differ from block 1 on)
    expect(Array.from(dynamoSequenceHashes(p, { blockSize: PAGE }))[1]).not.toBe(local[1]);
    const again = await complete(fe.baseUrl, p);
    expect(again.cachedTokens).toBe(48);
    expect(again.text).toBe(first.text);
    expect(problems).toEqual([]);
  });

  it("Cache, Inspect, Think by kvctl worker id, on the worker the KV router chose", async () => {
    const p = tokens(200, 64);
    await complete(fe.baseUrl, p);
    const hs = hashesOf(p);
    const w = await holder(hs);
    const pin = await pub.send(w, { type: "Cache", block_hashes: hs, pin: true, ttl_seconds: 60 });
    expect(pin).toMatchObject({ status: "applied", affected: 4, worker_id: w });
    const ins = await pub.send(w, { type: "Inspect", block_hashes: hs });
    expect(ins.status).toBe("applied");
    expect(ins.tiers.GPU).toBe(4);
    const blocks = (ins.detail as { blocks: { pin_count: number }[] }).blocks;
    expect(blocks.every((x) => x.pin_count === 1)).toBe(true);
    const other = w === kvA ? kvB : kvA;
    expect((await pub.send(other, { type: "Inspect", block_hashes: hs })).missing).toEqual(hs);
    expect((await pub.send(w, { type: "Cache", block_hashes: hs, pin: false })).status).toBe(
      "applied",
    );
    const think = await pub.send(w, { type: "Think", block_hashes: hs.slice(2), transient: true });
    expect(think.status).not.toBe("error");
    expect((await complete(fe.baseUrl, p)).cachedTokens).toBe(48);
  });

  it("ToolStart/ToolEnd and Pause/RenewLease: relayed tier moves, and the next request through the frontend hits", async () => {
    const s = tokens(400, 64);
    const next = [...s, ...tokens(900, 8)];
    const fresh = await complete(fe.baseUrl, next);
    const hs = hashesOf(s);
    const w = await holder(hs);
    const start = await pub.send(w, {
      type: "ToolStart",
      session_id: "dyn-tool",
      block_hashes: hs,
    });
    expect(start.status).toBe("applied");
    // offloaded: Dynamo relays the device removals, the host copies stay
    await expect
      .poll(() => hs.every((h) => !index.lookup(h)?.residency.get(w)?.includes("GPU")), {
        timeout: 60_000,
        interval: 100,
      })
      .toBe(true);
    expect(hs.every((h) => index.lookup(h)?.residency.get(w)?.includes("CPU_PINNED"))).toBe(true);
    const end = await pub.send(w, { type: "ToolEnd", session_id: "dyn-tool", epoch: start.epoch! });
    expect(end.status).toBe("applied");
    await holder(hs, "GPU");
    const after = await complete(fe.baseUrl, next);
    expect(after.cachedTokens).toBe(64);
    expect(after.text).toBe(fresh.text);

    const pause = await pub.send(w, {
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 60,
      lease_id: "dyn-lease",
    });
    expect(pause.status).toBe("applied");
    await expect
      .poll(() => hs.every((h) => !index.lookup(h)?.residency.get(w)?.includes("GPU")), {
        timeout: 60_000,
        interval: 100,
      })
      .toBe(true);
    expect(
      (await pub.send(w, { type: "RenewLease", lease_id: "dyn-lease", new_ttl_seconds: 120 }))
        .status,
    ).toBe("applied");
    const lease = await pub.send(w, { type: "Inspect", lease_id: "dyn-lease" });
    expect(lease.status).toBe("applied");
    const resumed = await complete(fe.baseUrl, next);
    expect(resumed.cachedTokens).toBe(64); // from the host tier, through the frontend
    expect(resumed.text).toBe(fresh.text);
    expect(["applied", "partial"]).toContain(
      (await pub.send(w, { type: "RevokeLease", lease_id: "dyn-lease" })).status,
    );
  });

  it("Prune: the branch past the block is dropped (relayed removals) and the next request hits only the kept prefix", async () => {
    const s = tokens(600, 32);
    const branch = [...s, ...tokens(700, 32)];
    await complete(fe.baseUrl, [...branch, 1000]);
    const hs = hashesOf(branch);
    const w = await holder(hs);
    const prune = await pub.send(w, { type: "Prune", after_block_hash: hs[1] });
    expect(prune.status).toBe("applied");
    await expect
      .poll(
        () => hs.slice(2).every((h) => (index.lookup(h)?.residency.get(w) ?? []).length === 0),
        { timeout: 60_000, interval: 100 },
      )
      .toBe(true);
    expect((await complete(fe.baseUrl, [...branch, 1000])).cachedTokens).toBe(32);
  });

  it("Warm: a worker takes pages another worker stored in the shared L3, and Dynamo relays them on its host tier", async () => {
    const s = tokens(800, 64);
    await complete(fe.baseUrl, s);
    const hs = hashesOf(s);
    const w = await holder(hs);
    const other = w === kvA ? kvB : kvA;
    // a Pause backs the pages up to host and, with the file backend, to L3
    expect(
      (
        await pub.send(w, {
          type: "Pause",
          block_hashes: hs,
          ttl_seconds: 60,
          lease_id: "warm-src",
        })
      ).status,
    ).toBe("applied");
    const keys = storageKeys(s, { pageSize: PAGE });
    // the file backend names each page's file by its storage key: Warm reads them once all are written
    await expect
      .poll(() => keys.every((k) => readdirSync(l3).some((f) => f.startsWith(k))), {
        timeout: 120_000,
        interval: 250,
      })
      .toBe(true);
    const before = await pub.send(other, { type: "Inspect", block_hashes: hs });
    expect(before.missing).toEqual(hs);
    let warm: Awaited<ReturnType<typeof pub.send>> | undefined;
    await expect
      .poll(
        async () =>
          (warm = await pub.send(other, {
            type: "Warm",
            block_keys: keys,
            token_ids: s,
            target_tier: "CPU_TIER1",
          })).status,
        { timeout: 60_000, interval: 500 },
      )
      .toBe("applied")
      .catch((e) => {
        throw new Error(
          `${(e as Error).message}; last Warm ack on ${other}: ${JSON.stringify(warm, (_k, v) => (typeof v === "bigint" ? String(v) : v))}`,
        );
      });
    expect((await pub.send(other, { type: "Inspect", block_hashes: hs })).tiers).toEqual({
      CPU_PINNED: 4,
    });
    await holder(hs, "CPU_PINNED").then(() =>
      expect
        .poll(
          () => hs.every((h) => index.lookup(h)?.residency.get(other)?.includes("CPU_PINNED")),
          { timeout: 60_000, interval: 100 },
        )
        .toBe(true),
    );
    expect((await complete(fe.baseUrl, [...s, 1000])).cachedTokens).toBe(64);
  });

  it("kvctl watch on Dynamo's event plane: rows by kvctl worker id, tier counts from the relayed events", async () => {
    const args = [
      "--import",
      "tsx",
      join(packageRoot, "src/cli/bin.ts"),
      "watch",
      "--dynamo-discovery",
      discovery,
      "--dynamo-worker",
      `${a.dynamoId}=${kvA}`,
      "--json",
      "--interval",
      "1",
    ];
    const p = spawn(process.execPath, args, { cwd: packageRoot });
    type Table = { workers: { worker: string; GPU: number; bad: number }[] };
    let err = "";
    p.stderr.on("data", (d) => (err += d));
    // the first table that shows relayed blocks (one line a second; traffic until then)
    const shown = new Promise<Table>((resolve) =>
      createInterface({ input: p.stdout }).on("line", (l) => {
        const t = JSON.parse(l) as Table;
        if (t.workers.reduce((n, w) => n + w.GPU, 0) >= 3) resolve(t);
      }),
    );
    let table: Table | undefined;
    void shown.then((t) => (table = t));
    try {
      for (let i = 0; !table && i < 200 && p.exitCode === null; i++)
        await complete(fe.baseUrl, randomTokens(70_000 + i, 48), 1);
      expect(table, err).toBeDefined();
      for (const w of table!.workers) expect([kvA, kvB]).toContain(w.worker);
      expect(table!.workers.every((w) => w.bad === 0)).toBe(true);
    } finally {
      p.kill();
    }
  }, 600_000);

  /** `kvctl verify-hashes --zmq <SGLang stream> --dynamo <Dynamo's>` of worker a while traffic flows through the frontend. */
  async function verifyOver(
    sglang: string,
    events: number,
    onLine?: (l: string) => void,
  ): Promise<{ code: number; out: string }> {
    const args = [
      "--import",
      "tsx",
      join(packageRoot, "src/cli/bin.ts"),
      "verify-hashes",
      "--zmq",
      sglang,
      "--dynamo",
      dynamoEventsA,
      "--events",
      String(events),
    ];
    const p = spawn(process.execPath, args, { cwd: packageRoot });
    const lines: string[] = [];
    let listening!: () => void;
    const ready = new Promise<void>((r) => (listening = r));
    createInterface({ input: p.stdout }).on("line", (l) => {
      lines.push(l);
      if (l.startsWith("verify-hashes: listening on")) listening();
      onLine?.(l);
    });
    let err = "";
    p.stderr.on("data", (d) => (err += d));
    const code = new Promise<number>((r) => p.on("exit", (c) => r(c ?? -1)));
    let exited = false;
    void code.then(() => (exited = true));
    try {
      // No prompt before it listens on both planes: stores sent earlier queue in its socket and
      // arrive as one burst, which can fill its N events before any line of it was read here
      // (the proxy case arms on such a line), and Dynamo's relay of them goes unheard.
      await Promise.race([ready, code]);
      // fresh prompts until verify-hashes has its N stores from worker a (the KV router spreads
      // prompts with no overlap over both workers)
      for (let i = 0; !exited && i < 400; i++)
        await complete(fe.baseUrl, randomTokens(50_000 + seed++, 48), 1);
      return { code: await code, out: `${lines.join("\n")}\n${err}` };
    } finally {
      if (p.exitCode === null) p.kill();
    }
  }
  let seed = 0;

  it("verify-hashes on a live Dynamo worker: SGLang's chain and Dynamo's relayed tokens_hash match, exit 0", async () => {
    const r = await verifyOver(a.sglangEvents, 4);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/verdict: MATCH/);
    expect(r.out).toMatch(/verdict \(Dynamo\): MATCH/);
    expect(r.out).toMatch(
      new RegExp(
        `Dynamo worker ${a.dynamoId} device \\d+ block\\(s\\) \\[-?\\d+\\]: tokens_hash match`,
      ),
    );
    const m = /Dynamo: \d+ relayed block\(s\): (\d+) tokens_hash matched, 0 mismatched/.exec(r.out);
    expect(Number(m?.[1]), r.out).toBeGreaterThan(0);
  }, 600_000);

  it("verify-hashes exits 1 when a proxy corrupts one token of worker a's SGLang stream in flight", async () => {
    const sub = new Subscriber({ linger: 0 });
    sub.connect(a.sglangEvents);
    sub.subscribe("");
    const out = new Publisher({ linger: 0 });
    const port = await freePort();
    await out.bind(`tcp://127.0.0.1:${port}`);
    let corrupted = 0;
    let armed = false; // once verify-hashes has matched an event through the proxy (it is subscribed)
    const proxy = (async () => {
      for await (const frames of sub) {
        let payload = frames[2];
        // Every first-page store after arming, not one: verify-hashes prints its match a few events
        // after the proxy forwarded it, and a single corruption could land past its last event.
        if (armed && frames.length === 3) {
          const { batch } = decodeBatch(payload);
          const e = batch.events.find(
            (x) => x.type === "BlockStored" && x.parentBlockHash === null && x.tier === "GPU",
          );
          if (e && e.type === "BlockStored") {
            e.tokenIds[3] = e.tokenIds[3] === 9 ? 10 : 9;
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
        16,
        (l) => void (/: match$/.test(l) && (armed = true)),
      );
      expect(corrupted).toBeGreaterThan(0);
      expect(r.code, r.out).toBe(1);
      expect(r.out).toMatch(/MISMATCH at page 0/);
      expect(r.out).toMatch(
        /Dynamo tokens_hash: Dynamo worker \d+ .* tokens_hash \d+, its 16 token\(s\) hash to \d+/,
      );
      expect(r.out).toMatch(/verdict \(Dynamo\): MISMATCH/);
    } finally {
      sub.close();
      out.close();
      await proxy;
    }
  }, 600_000);
});

/** A SUB socket on `endpoint` (all topics), once its handshake with the publisher is done. */
async function subscribed(
  endpoint: string,
): Promise<{ sock: Subscriber; messages: Uint8Array[][] }> {
  const sock = new Subscriber({ linger: 0 });
  const shook = new Promise<void>((r) => sock.events.on("handshake", () => r()));
  sock.subscribe("");
  sock.connect(endpoint);
  await shook;
  const messages: Uint8Array[][] = [];
  void (async () => {
    for await (const m of sock) messages.push(m);
  })().catch(() => undefined);
  return { sock, messages };
}

describe("the entry point without kvctl flags is dynamo.sglang: same greedy output, same KV events", () => {
  let dir: string;
  let tree: PatchedTree;
  const sides: {
    worker: DynamoWorker;
    fe: DynamoFrontend;
    sglang: Uint8Array[][];
    dynamo: Uint8Array[][];
    socks: Subscriber[];
  }[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "kvctl-dynamo-same-"));
    const model = tinyModel();
    tree = buildPatchedTree();
    const workers = await Promise.all(
      (["stock", "kvctl"] as const).map((entry) =>
        startDynamoWorker({
          name: `worker-${entry}`,
          entry,
          tree: tree.dir,
          model,
          discovery: join(dir, entry, "discovery"),
          dir: join(dir, entry),
          pageSize: PAGE,
        }),
      ),
    );
    for (const [i, worker] of workers.entries()) {
      const name = i === 0 ? "stock" : "kvctl";
      const discovery = join(dir, name, "discovery");
      const fe = await startDynamoFrontend({
        name: `frontend-${name}`,
        discovery,
        dir: join(dir, name),
        routerMode: "kv",
      });
      const ch = readDynamoDiscovery(discovery).channels.find((c) => c.worker === worker.dynamoId);
      expect(ch).toBeDefined();
      const s = await subscribed(worker.sglangEvents);
      const d = await subscribed(ch!.endpoint.replace(/\/\/[^:]+:/, "//127.0.0.1:"));
      sides.push({ worker, fe, sglang: s.messages, dynamo: d.messages, socks: [s.sock, d.sock] });
    }
  }, 900_000);

  afterAll(async () => {
    for (const s of sides) for (const k of s.socks) k.close();
    await Promise.all(sides.flatMap((s) => [s.fe.stop(), s.worker.stop()]));
    tree?.remove();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 180_000);

  it("the same requests give the same text, cached_tokens, SGLang events and Dynamo-relayed events", async () => {
    const [stock, ours] = sides;
    expect(ours.worker.log()).not.toMatch(/kvctl on|kvctl subscriber|kvctl: Dynamo worker/);
    const sys = tokens(20, 48);
    const prompts = [
      [...sys, ...tokens(300, 20)],
      [...sys, ...tokens(400, 20)],
      [...sys, ...tokens(300, 20)],
      tokens(500, 40),
    ];
    for (const p of prompts) {
      const [x, y] = await Promise.all([
        complete(stock.fe.baseUrl, p, 8),
        complete(ours.fe.baseUrl, p, 8),
      ]);
      expect(y).toEqual(x);
    }
    // SGLang's own events: everything but the timestamp; Dynamo's: everything but its worker and publisher ids
    const sglangView = (ms: Uint8Array[][]) =>
      ms.map((m) =>
        JSON.stringify(decodeBatch(m[2]).batch.events, (_k, v) =>
          typeof v === "bigint" ? String(v) : v,
        ),
      );
    const dynamoView = (ms: Uint8Array[][]) =>
      ms.flatMap((m) =>
        decodeDynamoMessage(m).records.map((r) =>
          JSON.stringify({ tier: r.storageTier, data: r.data }, (_k, v) =>
            typeof v === "bigint" ? String(v) : v,
          ),
        ),
      );
    // 3 distinct prefixes stored on device and written back to host: at least 6 of each
    await expect
      .poll(
        () =>
          Math.min(
            stock.sglang.length,
            ours.sglang.length,
            stock.dynamo.length,
            ours.dynamo.length,
          ),
        { timeout: 60_000, interval: 100 },
      )
      .toBeGreaterThanOrEqual(6);
    await expect
      .poll(() => sglangView(ours.sglang), { timeout: 30_000, interval: 200 })
      .toEqual(sglangView(stock.sglang));
    await expect
      .poll(() => dynamoView(ours.dynamo), { timeout: 30_000, interval: 200 })
      .toEqual(dynamoView(stock.dynamo));
    expect(dynamoView(stock.dynamo).some((v) => v.includes('"stored"'))).toBe(true);
  });
});
