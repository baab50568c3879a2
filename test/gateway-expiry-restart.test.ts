// Two ends of a session's holds, against a real patched SGLang worker on CPU and a real nats-server
// (JetStream KV), with two gateway replicas running the agent policy in this process:
// - expiry: a record about to leave the bucket (a short sessions.ttlSeconds here) has every hold it
//   names released, by exactly one replica, without waiting for any pin or lease TTL;
// - a worker killed and restarted on the same ports is noticed from its KV-event stream (its
//   sequence starts over): the index forgets it, the policy forgets what it held there, and the
//   session's next turn pins the system prompt on the new process.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import type { SessionRecord } from "../src/gateway/sessions/holds/record.js";
import { parseJson } from "../src/protocol/json.js";
import { freePort } from "../src/util/net.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";
import { pollFor } from "./helpers/poll.js";

const TTL_SECONDS = 30;
let nats: NatsServer;
let jsDir: string;
let nc: NatsConnection;
let server: SglangServer;
let ports: { port: number; eventsPort: number };
const gateways: Gateway[] = [];
const logs: string[][] = [[], [], []];

const startWorker = () =>
  startSglangServer({
    natsUrl: nats.url,
    workerId: "w0",
    storageDir: "",
    maxTotalTokens: 2048,
    hostRatio: 2,
    readyTimeoutS: 540,
    extraArgs: ["--enable-cache-report"],
    ...ports,
  });

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-expiry-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  nc = await connect({ servers: nats.url });
  ports = { port: await freePort(), eventsPort: await freePort() };
  server = await startWorker();
  // Two replicas sharing a bucket with a short TTL, and one whose sessions outlive a worker restart.
  for (const i of [0, 1, 2]) {
    gateways.push(
      await createGateway({
        config: {
          listen: { host: "127.0.0.1", port: 0 },
          workers: [{ id: "w0", url: server.baseUrl }],
          nats: { url: nats.url, opTimeoutMs: 5000 },
          // Inspect once at start (so holds carry the worker's process), then only when asked.
          sessions:
            i < 2
              ? {
                  bucket: "expiry_sessions",
                  idleAfterSeconds: 0,
                  ttlSeconds: TTL_SECONDS,
                  inspectMs: 600_000,
                }
              : { bucket: "restart_sessions", idleAfterSeconds: 0, inspectMs: 600_000 },
          health: { intervalMs: 600_000, timeoutMs: 15_000, failures: 3 },
          policy: "agent",
          // Leases are what this suite releases: the idle rule is off by default.
          policies: { idle: { enabled: true } },
        },
        log: (l) => logs[i].push(l),
      }),
    );
  }
}, 600_000);

afterAll(async () => {
  for (const g of gateways) await g.close().catch(() => undefined);
  await server?.stop();
  await nc?.close();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

const SYSTEM = {
  role: "system",
  content: [
    {
      type: "text",
      text: "You are a careful agent. Think before acting, and keep every answer short. ".repeat(6),
      cache_control: { type: "ephemeral", ttl: "1h" },
    },
  ],
};

async function post(g: Gateway, path: string, body: unknown, sid?: string): Promise<number> {
  const r = await fetch(`${g.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(sid ? { "x-session-id": sid } : {}) },
    body: JSON.stringify(body),
  });
  await r.text();
  return r.status;
}

const turn = (g: Gateway, sid: string, text: string) =>
  post(
    g,
    "/v1/chat/completions",
    { messages: [SYSTEM, { role: "user", content: text }], max_tokens: 2, temperature: 0 },
    sid,
  );

interface InspectDetail {
  incarnation: string;
  blocks: { block_hash: bigint | number; pin_count: number }[];
  pool: { leases: number; tool_offloads: number };
}

/** The worker's own account: its process, every block it holds a pin on, its leases and offloads. */
async function inspect(): Promise<InspectDetail> {
  const env = {
    version: 1,
    id: `expiry-${Date.now()}-${Math.random().toString(36).slice(2)}`,
    issued_at_ms: Date.now(),
    command: { type: "Inspect" },
  };
  const m = await nc.request("kv-control-w0", JSON.stringify(env), { timeout: 15_000 });
  return (parseJson(m.string()) as { detail: InspectDetail }).detail;
}

const pinsOn = (d: InspectDetail, blocks: readonly string[]) =>
  d.blocks
    .filter((b) => blocks.includes(String(b.block_hash)))
    .reduce((n, b) => n + b.pin_count, 0);

/** `get`'s value once `ok` holds, polled (the worker's Inspect or the record in the bucket: it offers no release event to wait on). */
const until = <T>(what: string, get: () => Promise<T>, ok: (v: T) => boolean): Promise<T> =>
  pollFor(what, get, ok, {
    ms: 120_000,
    everyMs: 100,
    detail: (v) =>
      `${JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? String(x) : x))}\n${logs.map((l) => l.slice(-20).join("\n")).join("\n---\n")}`,
  });

const record = (sid: string) => (sid === "rs" ? gateways[2] : gateways[0]).sessions.get(sid);
const heldHolds = (r: SessionRecord | null) =>
  (r?.holds ?? []).filter((h) => h.state === "held" && h.blocks.length > 0);

describe("session expiry releases what the record names", () => {
  it("a record about to expire has its marker pin and its lease released by exactly one replica, well before either TTL", async () => {
    const [a] = gateways;
    expect(await turn(a, "exp", "Start the task.")).toBe(200);
    // The replica that served the turn knows what to lease.
    expect(await post(a, "/kvctl/v1/sessions/exp/events", { event: "idle" })).toBe(202);
    const rec = await until(
      "a marker pin and a lease held",
      () => record("exp"),
      (r) =>
        heldHolds(r).some((h) => h.kind === "marker") &&
        heldHolds(r).some((h) => h.kind === "lease"),
    );
    const marker = heldHolds(rec).find((h) => h.kind === "marker") as NonNullable<
      SessionRecord["holds"]
    >[number];
    // Both far longer than this test waits: only expiry can end them.
    expect(marker.ttlSeconds).toBeGreaterThan(600);
    expect(heldHolds(rec).find((h) => h.kind === "lease")?.ttlSeconds).toBeGreaterThan(60);
    const before = await inspect();
    expect(pinsOn(before, marker.blocks)).toBeGreaterThanOrEqual(marker.blocks.length);
    expect(before.pool.leases).toBe(1);
    const t0 = Date.now();
    const after = await until(
      "the worker to hold nothing of the session",
      () => inspect(),
      (d) => pinsOn(d, marker.blocks) === 0 && d.pool.leases === 0,
    );
    expect(after.pool.tool_offloads).toBe(0);
    expect(Date.now() - t0).toBeLessThan(120_000);
    const done = (await until(
      "the record to name no hold",
      () => record("exp"),
      (r) =>
        r !== null &&
        (r.holds ?? []).every((h) => h.blocks.length === 0 && h.releasing.length === 0),
    )) as SessionRecord;
    expect([done.pins, done.leases, done.tool]).toEqual([[], [], null]);
    // Exactly one replica ran it.
    expect(done.commands.filter((c) => c.state === "expired")).toHaveLength(1);
    const counts = await Promise.all(
      gateways.map(
        async (g) =>
          /kvctl_gateway_sessions_expired_total (\d+)/.exec(
            await (await fetch(`${g.url}/metrics`)).text(),
          )?.[1],
      ),
    );
    expect(counts.map(Number).reduce((x, y) => x + y, 0)).toBe(1);
  }, 300_000);
});

describe("a worker restarted on the same ports", () => {
  it("is noticed from its KV-event stream: its blocks leave the index, and the session's next turn pins the marker on the new process", async () => {
    const a = gateways[2];
    expect(await turn(a, "rs", "Begin.")).toBe(200);
    const rec = (await until(
      "the marker pin held",
      () => record("rs"),
      (r) => heldHolds(r).some((h) => h.kind === "marker"),
    )) as SessionRecord;
    const marker = heldHolds(rec).find((h) => h.kind === "marker") as NonNullable<
      SessionRecord["holds"]
    >[number];
    const oldProcess = (await inspect()).incarnation;
    expect(marker.incarnation).toBe(oldProcess);
    expect(pinsOn(await inspect(), marker.blocks)).toBe(marker.blocks.length);
    const chain = rec.chain.map((h) => BigInt(h));
    const onW0 = (h: bigint) => a.index.lookup(h)?.residency.has("w0") === true;
    expect(chain.some(onW0)).toBe(true);

    // The whole process group (the launcher started it in a session of its own).
    process.kill(-server.info.pid, "SIGKILL");
    const old = server;
    server = await startWorker();
    await old.stop().catch(() => undefined);
    expect((await inspect()).incarnation).not.toBe(oldProcess);

    // Work that is no session's makes the new process publish: the gateway sees its sequence start over.
    const restartLine = /worker w0 runs a new process \(its KV-event sequence started over\)/;
    await until(
      "the restart to be seen in the event stream",
      async () => {
        expect(
          await post(a, "/v1/completions", {
            prompt: `Unrelated prompt ${Date.now()}`,
            max_tokens: 1,
            temperature: 0,
          }),
        ).toBe(200);
        return logs[2].some((l) => restartLine.test(l));
      },
      (x) => x,
    );
    await until(
      "the new process to be learned",
      async () => logs[2].some((l) => /worker w0: its new process is/.test(l)),
      (x) => x,
    );
    // The index forgot the old process's blocks (the new one has not stored the session's).
    expect(chain.filter(onW0)).toEqual([]);
    expect(await (await fetch(`${a.url}/metrics`)).text()).toMatch(
      /kvctl_gateway_worker_restarts_total\{worker="w0"\} 1/,
    );

    expect(await turn(a, "rs", "Go on.")).toBe(200);
    const again = await until(
      "a marker pin on the new process",
      () => record("rs"),
      (r) => heldHolds(r).some((h) => h.kind === "marker" && h.incarnation !== oldProcess),
    );
    const fresh = heldHolds(again).find(
      (h) => h.kind === "marker" && h.incarnation !== oldProcess,
    ) as NonNullable<SessionRecord["holds"]>[number];
    expect(pinsOn(await inspect(), fresh.blocks)).toBe(fresh.blocks.length);
  }, 900_000);
});
