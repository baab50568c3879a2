// Holds that survive a replica's death: the session record names every hold the gateway asked a
// worker for, by its own identity, and the worker agrees with it. Real nats-server (JetStream KV),
// gateway replicas in process and in child processes (killed with SIGKILL), and a worker stand-in
// (test/helpers/worker-stand-in.ts: a worker that hangs a turn or restarts on cue, read back
// exactly). The agent policy's part is tested on its own at the end.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway, type GatewayConfigInput } from "../src/gateway/index.js";
import type { PolicyCommand } from "../src/contract/policy.js";
import { newSessionRecord, type SessionRecord } from "../src/gateway/sessions/holds/record.js";
import { sessionKey } from "../src/gateway/sessions/session-store.js";
import { createAgentPolicy } from "../src/policy/agent-policy.js";
import { blocksOf, holdsPolicy, SESSIONLESS } from "./helpers/holds-policy.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { chainOf, finished, joined, started } from "./helpers/policy-observations.js";
import { startWorkerStandIn, type WorkerStandIn } from "./helpers/worker-stand-in.js";
import { until } from "./helpers/poll.js";

let nats: NatsServer;
let jsDir: string;
let w0: WorkerStandIn;
let nc: NatsConnection;
const gateways: Gateway[] = [];
const children: ChildProcess[] = [];
const logs: string[] = [];
const BUCKET = "holds_test";

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-holds-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  w0 = await startWorkerStandIn("w0", nats.url);
  nc = await connect({ servers: nats.url });
}, 60_000);

afterEach(async () => {
  for (const g of gateways.splice(0)) await g.close();
  for (const c of children.splice(0))
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  if (w0) w0.hold = null;
});

afterAll(async () => {
  await nc?.close();
  await w0?.close();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
});

function config(sessions: Record<string, unknown> = {}): GatewayConfigInput {
  return {
    listen: { host: "127.0.0.1", port: 0 },
    workers: [{ id: "w0", url: w0.url }],
    nats: { url: nats.url, opTimeoutMs: 5000 },
    health: { intervalMs: 60_000, timeoutMs: 5000, failures: 3 },
    sessions: {
      bucket: BUCKET,
      idleAfterSeconds: 0,
      heartbeatMs: 60_000,
      inspectMs: 0,
      ...sessions,
    },
  };
}

async function gw(sessions: Record<string, unknown> = {}, seen: unknown[] = []): Promise<Gateway> {
  const g = await createGateway({
    config: config(sessions),
    policy: holdsPolicy(seen),
    log: (l) => logs.push(l),
  });
  gateways.push(g);
  return g;
}

/** A replica in a child process (running the same scripted policy) that a test can SIGKILL. */
async function childReplica(
  sessions: Record<string, unknown>,
): Promise<{ url: string; proc: ChildProcess }> {
  // node itself (tsx as a loader, not its wrapper process), so SIGKILL reaches the replica.
  const proc = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      join("test", "helpers", "replica-child.ts"),
      JSON.stringify(config(sessions)),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(proc);
  let err = "";
  proc.stderr?.on("data", (d: Buffer) => {
    err = (err + d.toString()).slice(-4000);
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("\n"))
        resolve((JSON.parse(out.slice(0, out.indexOf("\n"))) as { url: string }).url);
    });
    proc.once("exit", (code) => reject(new Error(`replica exited ${code}: ${err}`)));
  });
  return { url, proc };
}

async function kill(proc: ChildProcess): Promise<void> {
  const gone = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGKILL");
  await gone;
}

const chat = (url: string, sid: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-session-id": sid },
    body: JSON.stringify({ messages: [{ role: "user", content: `hello ${sid}` }] }),
  });

const hint = (url: string, sid: string, event: string) =>
  fetch(`${url}/kvctl/v1/sessions/${encodeURIComponent(sid)}/events`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ event, ...(event === "tool_start" ? { tool_name: "t" } : {}) }),
  });

/** Pins per block the record names (its pins field, which every gateway version writes). */
function namedPins(r: SessionRecord | null): Map<string, number> {
  const n = new Map<string, number>();
  for (const p of r?.pins ?? []) for (const h of p.blockHashes) n.set(h, (n.get(h) ?? 0) + 1);
  return n;
}

const workerPins = (sid: string) =>
  new Map(
    blocksOf(sid)
      .filter((h) => w0.pins.has(h))
      .map((h) => [String(h), w0.pins.get(h) as number]),
  );

/**
 * Holds the worker's answers, sends a turn from a replica (`send`) and waits until it has reached
 * the worker with its hold on `holder`'s three blocks. Returns what kills that replica and then
 * lets the worker answer, resolving to when the replica was killed.
 */
async function turnHeldAtWorker(
  holder: string,
  send: () => Promise<unknown>,
): Promise<(proc: ChildProcess) => Promise<number>> {
  let release: () => void = () => undefined;
  w0.hold = new Promise<void>((r) => {
    release = r;
  });
  const arrived = w0.arrived;
  void send().catch(() => undefined);
  await until(
    `the turn of ${holder} to reach the worker with its hold`,
    () => w0.arrived > arrived && workerPins(holder).size === 3,
  );
  return async (proc) => {
    await kill(proc);
    const killedAt = Date.now();
    w0.hold = null;
    release();
    return killedAt;
  };
}

describe("one truth for holds", () => {
  it("releasing a turn's in-flight hold leaves the marker pin on the same blocks in the record, as on the worker", async () => {
    const g = await gw();
    for (let i = 0; i < 2; i++) {
      expect((await chat(g.url, "s1")).status).toBe(200);
      await g.settled();
    }
    // The marker pins all 4 blocks once; the second turn's in-flight hold on 3 of them is gone.
    expect(workerPins("s1")).toEqual(new Map(blocksOf("s1").map((h) => [String(h), 1])));
    expect(namedPins(await g.sessions.get("s1"))).toEqual(workerPins("s1"));
  });
});

describe("close means close, on any replica", () => {
  it("close sent to a replica that never served the session releases its pins and every lease", async () => {
    const a = await gw();
    const b = await gw();
    expect((await chat(a.url, "s2")).status).toBe(200);
    await a.settled();
    // Idle twice (a return between): two leases, as the agent policy's idle rule once left them.
    for (let i = 0; i < 2; i++) {
      expect((await hint(a.url, "s2", "idle")).status).toBe(202);
      await a.settled();
      expect((await chat(a.url, "s2")).status).toBe(200);
      await a.settled();
    }
    expect(w0.leases.has("s2.1") && w0.leases.has("s2.2")).toBe(true);
    expect(workerPins("s2").size).toBe(4);
    expect((await hint(b.url, "s2", "close")).status).toBe(202);
    await until("the worker to hold nothing of s2", async () => {
      await b.settled();
      return workerPins("s2").size === 0 && !w0.leases.has("s2.1") && !w0.leases.has("s2.2");
    });
    const rec = await b.sessions.get("s2");
    expect(rec?.pins).toEqual([]);
    expect(rec?.leases).toEqual([]);
  });

  it("a temporary hold taken by a replica killed mid-turn is released by a close on another replica", async () => {
    const b = await gw();
    const c = await childReplica({ heartbeatMs: 60_000 });
    const killSender = await turnHeldAtWorker("s3", () => chat(c.url, "s3"));
    await killSender(c.proc);
    expect((await hint(b.url, "s3", "close")).status).toBe(202);
    await until("the killed replica's hold to go", async () => {
      await b.settled();
      return workerPins("s3").size === 0;
    });
    expect(namedPins(await b.sessions.get("s3")).size).toBe(0);
  });
});

describe("orphan reaping", () => {
  it("a replica that disappears mid-turn has its in-flight hold released by another within a bounded time, and the record says so", async () => {
    const b = await gw({ heartbeatMs: 200 });
    const c = await childReplica({ heartbeatMs: 200 });
    const killSender = await turnHeldAtWorker("s4", () => chat(c.url, "s4"));
    const killedAt = await killSender(c.proc);
    await until("the reaper to release the hold", async () => {
      await b.settled();
      return workerPins("s4").size === 0;
    });
    // Silent for 3 heartbeats, found at the next one: well within 20 of them even on a busy machine.
    expect(Date.now() - killedAt).toBeLessThan(20 * 200 + 2000);
    const rec = await b.sessions.get("s4");
    expect(rec?.commands.some((x) => x.state === "reaped" && /gone/.test(x.reason))).toBe(true);
    expect(namedPins(rec).size).toBe(0);
  });

  it("a sessionless request's in-flight hold is named with its replica's identity, and reaped when that replica disappears mid-turn", async () => {
    const b = await gw({ heartbeatMs: 200 });
    const c = await childReplica({ heartbeatMs: 200 });
    const body = JSON.stringify({ messages: [{ role: "user", content: "no session here" }] });
    const killSender = await turnHeldAtWorker(SESSIONLESS, () =>
      fetch(`${c.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      }),
    );
    // The hold is named in a record (the child replica's own), under that replica's identity.
    const kv = await new Kvm(nc).open(BUCKET);
    const named: { replica: string; kind: string; blocks: string[] }[] = [];
    for await (const k of await kv.keys()) {
      const e = await kv.get(k);
      const r = e?.operation === "PUT" && e.length ? e.json<Partial<SessionRecord>>() : null;
      for (const h of r?.holds ?? [])
        if (h.blocks.length && h.blocks.every((x) => blocksOf(SESSIONLESS).map(String).includes(x)))
          named.push(h);
    }
    expect(named.map((h) => [h.kind, h.blocks.length])).toEqual([["inflight", 3]]);
    expect(named[0].replica).toMatch(new RegExp(`-${c.proc.pid}-`));
    const killedAt = await killSender(c.proc);
    await until("the reaper to release the sessionless hold", async () => {
      await b.settled();
      return workerPins(SESSIONLESS).size === 0;
    });
    expect(Date.now() - killedAt).toBeLessThan(20 * 200 + 2000);
  });
});

describe("reconciliation with the worker", () => {
  it("a restarted worker is noticed from its Inspect: the policy hears it, and the next turn is not told of holds the old process took", async () => {
    const seen: Record<string, any>[] = [];
    const g = await gw({ inspectMs: 200 }, seen);
    expect((await chat(g.url, "s5")).status).toBe(200);
    await g.settled();
    await until("a first Inspect", () => seen.some((o) => o.type === "WorkerPins"));
    w0.restart();
    await until("the restart to be noticed", () =>
      seen.some((o) => o.type === "WorkerCleared" && o.worker === "w0" && o.reason === "restart"),
    );
    expect((await chat(g.url, "s5")).status).toBe(200);
    await g.settled();
    const starts = seen.filter((o) => o.type === "TurnStarted" && o.sessionId === "s5");
    expect(starts[0].stored).toBeNull();
    expect(starts[1].stored.pins).toEqual([]);
    const text = await (await fetch(`${g.url}/metrics`)).text();
    expect(text).toMatch(/kvctl_gateway_worker_restarts_total\{worker="w0"\} 1/);
  });
});

describe("bad input", () => {
  it("a record another gateway version wrote is left as it is, counted and logged once; the session is still served", async () => {
    const kv = await new Kvm(nc).open(BUCKET);
    const foreign = { v: 2, id: "s6", holds: "whatever v2 keeps" };
    await kv.put(sessionKey("s6"), JSON.stringify(foreign));
    const g = await gw();
    for (let i = 0; i < 2; i++) expect((await chat(g.url, "s6")).status).toBe(200);
    await g.settled();
    expect((await kv.get(sessionKey("s6")))?.json()).toEqual(foreign);
    expect(logs.filter((l) => l.includes('"s6"') && l.includes("version 2")).length).toBe(1);
    // No hold is taken that only this replica's copy would name (no other replica could release it).
    expect(workerPins("s6").size).toBe(0);
    expect(
      logs.filter((l) => l.includes('"s6"') && l.includes("could not be recorded")).length,
    ).toBe(1);
    expect(await (await fetch(`${g.url}/metrics`)).text()).toMatch(
      /kvctl_gateway_session_store_errors_total\{op="version"\} 1/,
    );
  });

  it("an older gateway's record (pins and leases without identities) is adopted: close releases them", async () => {
    const kv = await new Kvm(nc).open(BUCKET);
    const r = newSessionRecord("s7", Date.now()) as Partial<SessionRecord>;
    delete r.holds;
    const hs = blocksOf("s7");
    r.pins = [{ worker: "w0", blockHashes: hs.map(String), ttlSeconds: 3600, atMs: Date.now() }];
    r.leases = [
      {
        worker: "w0",
        leaseId: "old-lease",
        blockHashes: hs.map(String),
        ttlSeconds: 3600,
        atMs: Date.now(),
      },
    ];
    await kv.put(sessionKey("s7"), JSON.stringify(r));
    for (const h of hs) w0.pins.set(h, 1);
    w0.leases.set("old-lease", hs);
    const g = await gw();
    expect((await hint(g.url, "s7", "close")).status).toBe(202);
    await until("the adopted holds to go", async () => {
      await g.settled();
      return workerPins("s7").size === 0 && !w0.leases.has("old-lease");
    });
    expect(logs.some((l) => l.includes('"s7"') && l.includes("older gateway"))).toBe(true);
  });
});

describe("bad input: a worker's counts the records cannot explain", () => {
  it("fewer pins than the record names: counted every round, logged once, the session still served, and close leaves no hold named", async () => {
    const from = logs.length;
    const g = await gw({ inspectMs: 200 });
    expect((await chat(g.url, "s8")).status).toBe(200);
    await g.settled();
    await until("the marker pin", () => workerPins("s8").size === 4);
    // The worker lost them (as a process that dropped its pins would).
    for (const h of blocksOf("s8")) w0.pins.delete(h);
    const divergences = async () =>
      Number(
        /kvctl_gateway_pin_divergences_total\{worker="w0",kind="fewer_pins"\} (\d+)/.exec(
          await (await fetch(`${g.url}/metrics`)).text(),
        )?.[1] ?? 0,
      );
    await until(
      "two Inspect rounds to count the missing pins",
      async () => (await divergences()) >= 8,
    );
    expect(
      logs
        .slice(from)
        .filter((l) => /worker w0 holds fewer pins than the session records name/.test(l)),
    ).toHaveLength(1);
    expect((await chat(g.url, "s8")).status).toBe(200);
    expect((await hint(g.url, "s8", "close")).status).toBe(202);
    await until("the record to name no hold", async () => {
      await g.settled();
      const r = await g.sessions.get("s8");
      return r !== null && (r.holds ?? []).length === 0 && (r.releases ?? []).length === 0;
    });
    expect(workerPins("s8").size).toBe(0);
  });
});

describe("agent policy", () => {
  it("a session idle twice has every lease revoked by close", () => {
    const p = createAgentPolicy({
      config: {
        idle: { enabled: true },
        inflight: { enabled: false },
        tools: { enabled: false },
        think: { enabled: false },
        pins: { enabled: false },
        prune: { enabled: false },
        warm: { enabled: false },
      },
      registry: new Registry(),
      log: () => undefined,
    });
    p.observe(joined(0));
    const paused = new Set<string>();
    const revoked = new Set<string>();
    const note = (out: readonly PolicyCommand[]) => {
      for (const c of out) {
        if (c.command.type === "Pause") paused.add(c.command.lease_id);
        if (c.command.type === "RevokeLease") revoked.add(c.command.lease_id);
      }
    };
    const idle = (at: number) =>
      note(
        p.observe({
          type: "SessionIdle",
          at,
          sessionId: "s",
          worker: "w0",
          idleMs: 30_000,
          chain: chainOf(5),
        }),
      );
    note(p.observe(started(0, "s")));
    note(p.observe(finished(1, "s", chainOf(5))));
    idle(30_000);
    note(p.observe(started(40_000, "s")));
    note(p.observe(finished(40_001, "s", chainOf(5))));
    idle(80_000);
    note(
      p.observe({
        type: "SessionHint",
        at: 90_000,
        sessionId: "s",
        event: "close",
        toolName: null,
        toolCallId: null,
        keepTokens: null,
      }),
    );
    expect(paused.size).toBe(2);
    expect(revoked).toEqual(paused);
  });
});
