// The publisher's request/reply layer (one wildcard inbox, replies matched by token) against a
// real nats-server: every reply reaches its own caller, failures come back as nats.js's own error
// classes, and nothing waits past a closed connection or a refused inbox subscription.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type Msg,
  type NatsConnection,
  NoRespondersError,
  RequestError,
  TimeoutError,
} from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectControlPlane, ControlPublisher, DeliveryError } from "../src/control/index.js";
import { ReplyMux } from "../src/control/reply-mux.js";
import { ReferenceResponder } from "../src/testing/index.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";
import { repoRoot } from "./helpers/python.js";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

describe("ReplyMux on a real nats-server", () => {
  let server: NatsServer;
  let nc: NatsConnection;
  // Requests on "gate" are held until the test answers them: a late reply is sent when the test
  // says so, never raced against a timer.
  const held: Msg[] = [];
  beforeAll(async () => {
    server = await startNatsServer();
    nc = await connectControlPlane({ servers: server.url, maxReconnectAttempts: 0 });
    // Echoes the body back after a delay the body names, so replies come back out of order.
    nc.subscribe("echo", {
      callback: (_e, m) =>
        void setTimeout(() => m.respond(m.data), Number(dec(m.data).split(":")[1])),
    });
    nc.subscribe("gate", { callback: (_e, m) => void held.push(m) });
    await nc.flush();
  });
  afterAll(async () => {
    await nc?.close();
    await server?.stop();
  });

  it("matches 300 concurrent replies, arriving out of order, to their own callers", async () => {
    const mux = new ReplyMux(nc);
    const bodies = Array.from({ length: 300 }, (_, i) => `${i}:${(i * 7919) % 23}`);
    const replies = await Promise.all(bodies.map((b) => mux.request("echo", enc(b), 5000)));
    expect(replies.map((m) => dec(m.data))).toEqual(bodies);
    expect(mux.size).toBe(0);
  });

  it("times out with nats.js's TimeoutError and drops the late reply", async () => {
    const mux = new ReplyMux(nc);
    held.length = 0;
    await expect(mux.request("gate", enc("late"), 100)).rejects.toBeInstanceOf(TimeoutError);
    // The request reached its responder, which has not answered: the timeout was the mux's own.
    expect(held.map((m) => dec(m.data))).toEqual(["late"]);
    expect(mux.size).toBe(0);
    // A request waits while the late reply is sent; the round trip after the reply (a flush of the
    // connection that sent it) has delivered it, and it must not be taken for this one's answer.
    const next = mux.request("gate", enc("next"), 60_000);
    await nc.flush();
    expect(held.map((m) => dec(m.data))).toEqual(["late", "next"]);
    held[0].respond(enc("reply to late"));
    await nc.flush();
    expect(mux.size).toBe(1);
    held[1].respond(enc("reply to next"));
    expect(dec((await next).data)).toBe("reply to next");
    expect(mux.size).toBe(0);
  });

  it("says no responders with nats.js's NoRespondersError, naming the subject", async () => {
    const mux = new ReplyMux(nc);
    const err = await mux.request("nobody-here", enc("x"), 2000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoRespondersError);
    expect((err as NoRespondersError).subject).toBe("nobody-here");
  });

  it("fails what is waiting as soon as the connection closes, and refuses new requests", async () => {
    const own = await connectControlPlane({ servers: server.url, maxReconnectAttempts: 0 });
    const mux = new ReplyMux(own);
    held.length = 0;
    // Never answered, and a timeout past the test's own: only the close can end this request.
    const waiting = mux.request("gate", enc("never answered"), 600_000).catch((e: unknown) => e);
    await own.flush();
    await nc.flush();
    expect(held).toHaveLength(1);
    await own.close();
    const err = await waiting;
    expect(err).toBeInstanceOf(RequestError);
    expect(String((err as Error).message)).toMatch(/connection closed/);
    await expect(mux.request("echo", enc("after:0"), 1000)).rejects.toBeInstanceOf(RequestError);
  });
});

describe("reply inboxes on an account that restricts subscriptions", () => {
  const dir = mkdtempSync(join(tmpdir(), "kvctl-inbox-"));
  let server: NatsServer;
  beforeAll(async () => {
    const conf = join(dir, "perms.conf");
    writeFileSync(
      conf,
      `authorization {
  users = [
    { user: router, password: r, permissions: { publish: ["kv-control-p0", "kv-control-broadcast"], subscribe: ["_KVCTL_ROUTER.>"] } }
    { user: worker, password: w, permissions: { publish: [">"], subscribe: ["kv-control-p0", "kv-control-broadcast"] } }
  ]
}
`,
    );
    server = await startNatsServer(["-c", conf]);
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("acks come back under the granted inbox prefix; without it the refusal is reported, not waited out", async () => {
    const worker = await connectControlPlane({
      servers: server.url,
      user: "worker",
      pass: "w",
      maxReconnectAttempts: 0,
    });
    await ReferenceResponder.start(worker, { workerId: "p0", log: () => {} });
    const granted = await connectControlPlane({
      servers: server.url,
      user: "router",
      pass: "r",
      inboxPrefix: "_KVCTL_ROUTER",
      maxReconnectAttempts: 0,
    });
    const plain = await connectControlPlane({
      servers: server.url,
      user: "router",
      pass: "r",
      maxReconnectAttempts: 0,
    });
    try {
      const publisher = new ControlPublisher(granted, { inboxPrefix: "_KVCTL_ROUTER" });
      expect((await publisher.send("p0", { type: "Inspect" })).status).toBe("applied");
      // Broadcast acks come back through the same mux, under the same granted prefix.
      const all = await publisher.broadcast(
        { type: "Inspect" },
        { workers: ["p0"], deadlineMs: 30_000 },
      );
      expect(all.acks.map((a) => [a.worker_id, a.status])).toEqual([["p0", "applied"]]);
      expect(all.silent).toEqual([]);

      // The prefix is the publisher's to name: one given to the connection alone is not used.
      // (Timeouts past the test's own: the refusal is reported, never waited out.)
      const unprefixedPub = new ControlPublisher(granted, { timeoutMs: 600_000, retries: 0 });
      const unprefixed = await unprefixedPub
        .send("p0", { type: "Inspect" })
        .catch((e: unknown) => e);
      expect(unprefixed).toBeInstanceOf(DeliveryError);
      expect(String((unprefixed as Error).message)).toMatch(
        /permissions violation for subscription to "_INBOX\./i,
      );
      expect(unprefixedPub.counters.timedOut).toBe(0);

      // A broadcast whose inbox subscription is refused fails at once, naming the permission,
      // instead of reporting every worker silent at the deadline.
      const broadcaster = new ControlPublisher(plain);
      const refusedBroadcast = await broadcaster
        .broadcast({ type: "Inspect" }, { workers: ["p0"], deadlineMs: 600_000 })
        .catch((e: unknown) => e);
      expect(refusedBroadcast).toBeInstanceOf(DeliveryError);
      expect(String((refusedBroadcast as Error).message)).toMatch(
        /permissions violation for subscription/i,
      );
      expect(broadcaster.counters.silentWorkers).toBe(0);

      const plainPub = new ControlPublisher(plain, { timeoutMs: 600_000, retries: 0 });
      const err = await plainPub.send("p0", { type: "Inspect" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DeliveryError);
      expect(String((err as Error).message)).toMatch(/permission/i);
      expect(plainPub.counters.timedOut).toBe(0);

      // The CLI's --inbox-prefix reaches the connection the same way (run async: the responder
      // answering it lives in this process).
      const cli = (...extra: string[]) =>
        new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
          const args = [
            "--import",
            "tsx",
            "src/cli/bin.ts",
            "send",
            "p0",
            "Inspect",
            "--nats-url",
            server.url,
            "--user",
            "router",
            "--password",
            "r",
            "--timeout-ms",
            "3000",
            "--retries",
            "0",
            ...extra,
          ];
          execFile(
            process.execPath,
            args,
            { cwd: repoRoot, timeout: 30_000 },
            (err, stdout, stderr) =>
              resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
          );
        });
      const [ok, refused] = await Promise.all([
        cli("--inbox-prefix", "_KVCTL_ROUTER", "--json"),
        cli(),
      ]);
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stdout).toContain('"status":"applied"');
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(/permission/i);
    } finally {
      await granted.close();
      await plain.close();
      await worker.close();
    }
  });
});
