// Chaos: three gateway replicas (`kvctl gateway --policy agent`, each its own process) in front of
// two real patched SGLang workers on CPU, sharing sessions through a real nats-server (JetStream
// KV). A seeded workload of sessions - a system prompt under a cache_control marker, turns, tool
// calls (tool_start/tool_end hints), idle gaps (idle hints: leases) - runs while replicas are
// SIGKILLed at random moments and restarted, and one worker is killed and restarted once. Then
// every session is closed and, without waiting for any TTL, each worker's own Inspect must show
// no pin, no lease and no tool offload, and every session record must name no hold. The seed is
// printed; KVCTL_CHAOS_SEED replays it.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SessionRecord } from "../src/gateway/sessions/holds/record.js";
import { parseJson } from "../src/protocol/json.js";
import { freePort } from "../src/util/net.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { uniform } from "./helpers/random.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

const SEED = process.env.KVCTL_CHAOS_SEED
  ? Number(process.env.KVCTL_CHAOS_SEED)
  : Math.floor(Math.random() * 2 ** 31);
const BUCKET = "chaos_sessions";
const SESSIONS = 6;
const STEPS = 6;

let nats: NatsServer;
let dir: string;
let nc: NatsConnection;
const servers: Record<string, SglangServer> = {};
const ports: Record<string, { port: number; eventsPort: number }> = {};
let configFile: string;
const replicas: ({ proc: ChildProcess; url: string } | null)[] = [null, null, null];
const events: string[] = [];
const replicaLogs: string[][] = [];
const diagnostics = () =>
  `${events.join("\n")}\n${replicaLogs.map((l, i) => `--- replica ${i}\n${l.join("\n")}`).join("\n")}`;
const t0 = Date.now();
const note = (line: string) => events.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${line}`);

function startWorker(id: string): Promise<SglangServer> {
  return startSglangServer({
    natsUrl: nats.url,
    workerId: id,
    storageDir: "",
    maxTotalTokens: 2048,
    hostRatio: 2,
    readyTimeoutS: 540,
    extraArgs: ["--enable-cache-report"],
    ...ports[id],
  });
}

async function startReplica(i: number): Promise<void> {
  const port = await freePort();
  const proc = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "src/cli/bin.ts",
      "gateway",
      "--config",
      configFile,
      "--listen",
      `127.0.0.1:${port}`,
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let err = "";
  const log = replicaLogs[i] ?? [];
  replicaLogs[i] = log;
  await new Promise<void>((resolve, reject) => {
    proc.stderr?.on("data", (d: Buffer) => {
      err = (err + d.toString()).slice(-8000);
      log.push(
        ...d
          .toString()
          .trim()
          .split("\n")
          .map((l) => `${((Date.now() - t0) / 1000).toFixed(1)}s ${l.slice(0, 300)}`),
      );
      if (log.length > 60) log.splice(0, log.length - 60);
      if (err.includes("listening on")) resolve();
    });
    proc.once("exit", (code) => reject(new Error(`replica ${i} exited ${code}: ${err}`)));
  });
  replicas[i] = { proc, url: `http://127.0.0.1:${port}` };
  note(`replica ${i} up`);
}

async function killReplica(i: number): Promise<void> {
  const r = replicas[i];
  if (!r) return;
  replicas[i] = null;
  const gone = new Promise((res) => r.proc.once("exit", res));
  r.proc.kill("SIGKILL");
  await gone;
  note(`replica ${i} SIGKILLed`);
}

beforeAll(async () => {
  console.log(`chaos: seed ${SEED} (KVCTL_CHAOS_SEED=${SEED} replays this schedule)`);
  dir = mkdtempSync(join(tmpdir(), "kvctl-chaos-"));
  nats = await startNatsServer(["-js", "-sd", dir]);
  nc = await connect({ servers: nats.url });
  for (const id of ["w0", "w1"])
    ports[id] = { port: await freePort(), eventsPort: await freePort() };
  const [a, b] = await Promise.all([startWorker("w0"), startWorker("w1")]);
  servers.w0 = a;
  servers.w1 = b;
  note("workers up");
  configFile = join(dir, "gateway.json");
  writeFileSync(
    configFile,
    JSON.stringify({
      workers: [
        { id: "w0", url: a.baseUrl },
        { id: "w1", url: b.baseUrl },
      ],
      nats: { url: nats.url, opTimeoutMs: 5000 },
      sessions: { bucket: BUCKET, idleAfterSeconds: 0, heartbeatMs: 500, inspectMs: 1000 },
      health: { intervalMs: 1000, timeoutMs: 15_000, failures: 2 },
      policy: "agent",
      // Every kind of hold in play: idle leases and queued requests' prefix pins are off by default.
      policies: { idle: { enabled: true }, inflight: { enabled: true } },
    }),
  );
  await Promise.all([0, 1, 2].map((i) => startReplica(i)));
}, 900_000);

afterAll(async () => {
  for (let i = 0; i < replicas.length; i++) await killReplica(i).catch(() => undefined);
  for (const s of Object.values(servers)) await s.stop().catch(() => undefined);
  await nc?.close();
  await nats?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 180_000);

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

/** Sends to a live replica chosen by `rand`, trying the others while it is killed under us. */
async function toReplica(
  rand: () => number,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<number> {
  // While a worker restarts its sessions move to the other one; a minute covers a slow machine.
  const deadline = Date.now() + 90_000;
  let last = "";
  while (Date.now() < deadline) {
    const live = replicas.filter((r): r is NonNullable<typeof r> => r !== null);
    const r = live[Math.floor(rand() * live.length)];
    if (!r) {
      await new Promise((res) => setTimeout(res, 100));
      continue;
    }
    try {
      const res = await fetch(`${r.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(60_000),
      });
      const text = await res.text();
      // A turn's record is written just after its answer: a hint racing it finds no session yet.
      const early =
        res.status === 404 && path.includes("/sessions/") && Date.now() < deadline - 80_000;
      if (res.status < 500 && !early) return res.status;
      last = `${res.status} ${text.slice(0, 300)}`;
    } catch (e) {
      // killed mid-request: another replica takes it
      last = (e as Error).message;
    }
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`seed ${SEED}: no replica answered ${path} (last: ${last})\n${diagnostics()}`);
}

async function session(sid: string, rand: () => number): Promise<void> {
  const messages: unknown[] = [SYSTEM];
  const turn = async (text: string) => {
    messages.push({ role: "user", content: text });
    expect(
      await toReplica(
        rand,
        "/v1/chat/completions",
        { messages, max_tokens: 2, temperature: 0 },
        { "x-session-id": sid },
      ),
    ).toBe(200);
    note(`${sid} turn`);
    messages.push({ role: "assistant", content: "ok" });
  };
  // 404: the replica that served the session's only turn died before writing its record.
  const hint = async (event: string, extra: Record<string, unknown> = {}) =>
    expect([202, 404]).toContain(
      await toReplica(rand, `/kvctl/v1/sessions/${sid}/events`, { event, ...extra }),
    );
  await turn(`Start task ${sid}.`);
  for (let step = 0; step < STEPS; step++) {
    const x = rand();
    if (x < 0.35) await turn(`Step ${step} of ${sid}: go on.`);
    else if (x < 0.6) {
      await hint("tool_start", {
        tool_name: rand() < 0.5 ? "search" : "build",
        tool_call_id: `c${step}`,
      });
      await new Promise((res) => setTimeout(res, rand() * 800));
      await hint("tool_end", { tool_call_id: `c${step}` });
    } else if (x < 0.85) await hint("idle");
    else await new Promise((res) => setTimeout(res, rand() * 1500));
  }
}

/** Replicas killed at random moments and restarted after a random pause, until `stop` says so. */
async function replicaChaos(rand: () => number, stop: () => boolean): Promise<number> {
  let kills = 0;
  while (!stop()) {
    await new Promise((res) => setTimeout(res, 500 + rand() * 2500));
    if (stop()) break;
    const i = Math.floor(rand() * replicas.length);
    if (!replicas[i] || replicas.filter(Boolean).length < 2) continue;
    await killReplica(i);
    kills++;
    await new Promise((res) => setTimeout(res, rand() * 1500));
    // A replica that fails to start (a worker being restarted now only joins late, but NATS or
    // the port may still refuse it) is started again until it comes up.
    for (let tries = 0; ; tries++) {
      try {
        await startReplica(i);
        break;
      } catch (e) {
        if (tries > 120) throw e;
        note(
          `replica ${i} did not start (${(e as Error).message.split("\n")[0].slice(0, 120)}); again`,
        );
        await new Promise((res) => setTimeout(res, 1000));
      }
    }
  }
  return kills;
}

async function restartWorker(rand: () => number): Promise<void> {
  await new Promise((res) => setTimeout(res, 1000 + rand() * 6000));
  // The server's whole process group (the launcher started it in a session of its own).
  try {
    process.kill(-servers.w1.info.pid, "SIGKILL");
  } catch (e) {
    note(`killing w1 failed: ${(e as Error).message}`);
    throw e;
  }
  note("worker w1 SIGKILLed");
  const old = servers.w1;
  servers.w1 = await startWorker("w1");
  await old.stop().catch(() => undefined);
  note("worker w1 restarted on its ports");
}

interface InspectDetail {
  incarnation: string;
  blocks: { block_hash: bigint | number; pin_count: number }[];
  pool: { leases: number; tool_offloads: number };
}

async function inspect(worker: string): Promise<InspectDetail> {
  const env = {
    version: 1,
    id: `chaos-${worker}-${Date.now()}-${Math.random().toString(36).slice(2)}`,
    issued_at_ms: Date.now(),
    command: { type: "Inspect" },
  };
  const m = await nc.request(`kv-control-${worker}`, JSON.stringify(env), { timeout: 15_000 });
  return (parseJson(m.string()) as { detail: InspectDetail }).detail;
}

async function records(): Promise<SessionRecord[]> {
  const kv = await new Kvm(nc).open(BUCKET);
  const out: SessionRecord[] = [];
  for await (const k of await kv.keys("s.>")) {
    const e = await kv.get(k);
    if (e?.operation === "PUT" && e.length) out.push(e.json<SessionRecord>());
  }
  return out;
}

describe("chaos: replicas and a worker die; close still releases everything", () => {
  it("ends with no pin, lease or tool offload on either worker and no hold named in any record", async () => {
    const rand = uniform(SEED);
    const seeds = Array.from({ length: SESSIONS + 2 }, () => Math.floor(rand() * 2 ** 31));
    let done = false;
    const chaos = replicaChaos(uniform(seeds[SESSIONS]), () => done);
    const worker = restartWorker(uniform(seeds[SESSIONS + 1]));
    const ids = Array.from({ length: SESSIONS }, (_, i) => `chaos-${SEED}-${i}`);
    // Two sessions at a time: the CPU workers are slow, and the machine is shared.
    void worker.catch(() => undefined);
    for (let i = 0; i < ids.length; i += 2)
      await Promise.all(ids.slice(i, i + 2).map((id, j) => session(id, uniform(seeds[i + j]))));
    await worker;
    done = true;
    const kills = await chaos;
    note(`workload done (${kills} replica kills)`);
    const closeRand = uniform(seeds[0] ^ 0x5eed);
    for (const id of ids)
      expect(
        await toReplica(closeRand, `/kvctl/v1/sessions/${id}/events`, { event: "close" }),
      ).toBe(202);
    note("every session closed");
    // No TTL is waited for: the shortest hold any policy takes lasts 120 s; this gives 45.
    const deadline = Date.now() + 45_000;
    let last = "";
    for (;;) {
      const [d0, d1] = await Promise.all([inspect("w0"), inspect("w1")]);
      const pinned = [...d0.blocks, ...d1.blocks].filter((b) => b.pin_count > 0).length;
      const recs = (await records()).filter((r) => ids.includes(r.id));
      const named = recs.flatMap((r) =>
        (r.holds ?? [])
          .filter((h) => h.blocks.length || h.releasing.length)
          .map((h) => `${r.id}:${h.kind}@${h.worker}`),
      );
      last = JSON.stringify({
        pinned,
        leases: [d0.pool.leases, d1.pool.leases],
        offloads: [d0.pool.tool_offloads, d1.pool.tool_offloads],
        named,
        records: recs.length,
      });
      if (
        pinned === 0 &&
        d0.pool.leases + d1.pool.leases === 0 &&
        d0.pool.tool_offloads + d1.pool.tool_offloads === 0 &&
        named.length === 0 &&
        recs.length === SESSIONS
      )
        break;
      if (Date.now() > deadline)
        throw new Error(`seed ${SEED}: not released 45 s after close: ${last}\n${diagnostics()}`);
      await new Promise((res) => setTimeout(res, 250));
    }
    note("workers and records agree: nothing held");
    console.log(`chaos: seed ${SEED}: ${events.join("; ")}`);
    for (const r of await records())
      if (ids.includes(r.id))
        expect([r.id, r.pins, r.leases, r.tool]).toEqual([r.id, [], [], null]);
  }, 900_000);
});
