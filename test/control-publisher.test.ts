// The NATS control plane end to end against a real nats-server: publisher -> subject -> reference
// responder (the test stand-in for the worker) -> ack.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AckTimeoutError,
  ControlPublisher,
  NoRespondersError,
  WindowFullError,
} from "../src/control/index.js";
import {
  type Ack,
  broadcastSubject,
  type Command,
  COMMAND_TYPES,
  CommandValidationError,
  decodeAck,
  decodeBody,
  EXAMPLE_COMMANDS,
  MAX_LIST_ENTRIES,
  uuidv7,
  workerSubject,
} from "../src/protocol/index.js";
import { ReferenceResponder } from "../src/testing/index.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";

let server: NatsServer;
let pubConn: NatsConnection;
let workerConn: NatsConnection;
const responders: ReferenceResponder[] = [];
const quiet = () => {};
// Every hash the examples mention, as one known chain on each responder.
const KNOWN = [
  111n,
  222n,
  333n,
  -6917529027641081856n,
  9223372036854775807n,
  -9223372036854775808n,
  42n,
  43n,
];

async function responder(
  workerId: string,
  extra: Partial<ConstructorParameters<typeof ReferenceResponder>[0]> = {},
) {
  const r = await ReferenceResponder.start(workerConn, {
    workerId,
    knownBlocks: KNOWN,
    log: quiet,
    record: true,
    ...extra,
  });
  responders.push(r);
  return r;
}

beforeAll(async () => {
  server = await startNatsServer();
  pubConn = await connect({ servers: server.url });
  workerConn = await connect({ servers: server.url });
});

afterAll(async () => {
  for (const r of responders) r.stop();
  await pubConn?.close();
  await workerConn?.close();
  await server?.stop();
});

describe("send", () => {
  it("every command type makes the round trip, exactly, and is acked by the named worker", async () => {
    const r = await responder("rt0");
    const pub = new ControlPublisher(pubConn, { timeoutMs: 2000 });
    // The examples run in order against one model, so each outcome follows from the ones before.
    const expected: Record<string, Ack["status"]> = {
      Cache: "applied", // all three hashes are known
      Prune: "applied", // removes 42 and 43, the descendants of INT64_MIN in the known chain
      Think: "noop", // 42 and 43 are gone: both listed missing
      Pause: "applied",
      RenewLease: "applied",
      RevokeLease: "applied", // purges 111 and 222
      Warm: "noop", // the toy storage backend does not hold that key
      ToolStart: "partial", // 111 and 222 were purged: only 333 is offloaded
      ToolEnd: "applied",
      Prefetch: "rejected", // ToolEnd ended sess-1's offload: the session it names has none in flight
      Inspect: "applied",
    };
    for (const type of COMMAND_TYPES) {
      const cmd = EXAMPLE_COMMANDS[type];
      const ack = await pub.send("rt0", cmd);
      expect(ack.worker_id).toBe("rt0");
      expect(ack.type).toBe(type);
      expect(ack.status, `${type}: ${ack.reason}`).toBe(expected[type]);
      const got = r.received.at(-1)!;
      expect(got.id).toBe(ack.id);
      expect(got.command).toEqual(cmd);
    }
    expect(pub.counters.sent).toBe(COMMAND_TYPES.length);
  });

  it("reports hashes the worker does not hold as missing, exactly", async () => {
    await responder("m0");
    const pub = new ControlPublisher(pubConn);
    const ack = await pub.send("m0", {
      type: "Cache",
      block_hashes: [111n, -9223372036854775807n, 9223372036854775806n],
      pin: true,
    });
    expect(ack.status).toBe("partial");
    expect(ack.affected).toBe(1);
    expect(ack.missing).toEqual([-9223372036854775807n, 9223372036854775806n]);
    expect(ack.tiers).toEqual({ CPU_PINNED: 1 });
  });

  it("acks a repeated id `duplicate` with the first outcome, and does not apply it twice", async () => {
    const r = await responder("d0");
    const pub = new ControlPublisher(pubConn);
    const id = uuidv7();
    const cmd: Command = { type: "Cache", block_hashes: [111n, 222n], pin: true };
    const first = await pub.send("d0", cmd, { id });
    const again = await pub.send("d0", cmd, { id });
    expect(first.status).toBe("applied");
    expect(again).toMatchObject({ id, status: "duplicate", requested: 2, affected: 2 });
    expect(again.reason).toContain("first outcome: applied");
    expect(r.model.blocks.get(111n)!.pins).toBe(1);
    expect(pub.counters.acked.duplicate).toBe(1);
  });

  it("rejects unknown leases and stale epochs (nothing changes)", async () => {
    await responder("s0");
    const pub = new ControlPublisher(pubConn);
    expect(
      await pub.send("s0", { type: "RenewLease", lease_id: "nope", new_ttl_seconds: 60 }),
    ).toMatchObject({ status: "rejected", reason: "unknown lease nope" });
    expect((await pub.send("s0", { type: "RevokeLease", lease_id: "nope" })).status).toBe(
      "rejected",
    );
    const t1 = await pub.send("s0", {
      type: "ToolStart",
      session_id: "s",
      block_hashes: [111n, 222n],
    });
    const t2 = await pub.send("s0", {
      type: "ToolStart",
      session_id: "s",
      block_hashes: [111n, 222n],
    });
    expect(t2.epoch).toBe(t1.epoch! + 1);
    const stale = await pub.send("s0", { type: "ToolEnd", session_id: "s", epoch: t1.epoch! });
    expect(stale).toMatchObject({
      status: "rejected",
      reason: `stale epoch ${t1.epoch} (current ${t2.epoch})`,
    });
    expect(
      (await pub.send("s0", { type: "ToolEnd", session_id: "s", epoch: t2.epoch! })).status,
    ).toBe("applied");
  });

  it("refuses invalid commands before they leave, naming the field", async () => {
    const r = await responder("v0");
    const pub = new ControlPublisher(pubConn);
    const before = r.stats.received;
    const bad: Array<[unknown, string]> = [
      [{ type: "Cache", block_hashes: [2n ** 63n], pin: true }, "block_hashes[0]"],
      [{ type: "RevokeLease", lease_id: "" }, "lease_id"],
      [{ type: "Cache", block_hashes: [1n], pin: true, ttl_seconds: -1 }, "ttl_seconds"],
      [{ type: "Cache", block_hashes: [1n], pin: true, ttl_seconds: 0 }, "ttl_seconds"],
      [
        { type: "Cache", block_hashes: new Array(MAX_LIST_ENTRIES + 1).fill(1n), pin: true },
        "block_hashes",
      ],
      [{ type: "Evict", block_hashes: [1n] }, "type"],
    ];
    for (const [cmd, field] of bad) {
      const err = await pub.send("v0", cmd as Command).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CommandValidationError);
      expect((err as CommandValidationError).field).toBe(field);
    }
    expect(() => pub.publish("v0", { type: "RevokeLease", lease_id: "" })).toThrow(
      CommandValidationError,
    );
    await pubConn.flush();
    expect(r.stats.received).toBe(before);
    expect(pub.counters.rejectedLocally).toBe(bad.length + 1);
    expect(pub.counters.sent).toBe(0);
  });

  it("fire-and-forget publish is applied and counted without an ack", async () => {
    const r = await responder("f0");
    const pub = new ControlPublisher(pubConn);
    const id = pub.publish("f0", { type: "Cache", block_hashes: [42n], pin: true });
    await pubConn.flush();
    // No ack to wait for: wait until the responder has handled it.
    for (const end = Date.now() + 30_000; r.stats.unanswered < 1 && Date.now() < end; )
      await workerConn.flush();
    expect(r.stats.unanswered).toBe(1);
    expect(r.received.at(-1)!.id).toBe(id);
    expect(r.model.blocks.get(42n)!.pins).toBe(1);
    expect(pub.counters).toMatchObject({ sent: 1, published: 1 });
  });
});

describe("failures are told apart", () => {
  it("no responders: a distinct error, after the retries, counted", async () => {
    const pub = new ControlPublisher(pubConn, { retries: 2, backoffMs: 5 });
    const err = await pub.send("nobody-home", EXAMPLE_COMMANDS.Inspect).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoRespondersError);
    expect((err as NoRespondersError).attempts).toBe(3);
    expect((err as NoRespondersError).workerId).toBe("nobody-home");
    expect(pub.counters).toMatchObject({ sent: 1, retried: 2, noResponders: 1, timedOut: 0 });
  });

  it("timeout: a distinct error when a subscriber exists but does not answer in time", async () => {
    // A subscriber that records what it gets and never answers.
    const got: string[] = [];
    const sub = workerConn.subscribe(workerSubject("slow0"), {
      callback: (_e, m) => void got.push(String(decodeBody(m.data).id)),
    });
    await workerConn.flush();
    const pub = new ControlPublisher(pubConn, { timeoutMs: 100, retries: 1, backoffMs: 5 });
    const err = await pub.send("slow0", EXAMPLE_COMMANDS.Inspect).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AckTimeoutError);
    expect((err as AckTimeoutError).attempts).toBe(2);
    // Both attempts (one id) reached the subscriber, which answered neither.
    await workerConn.flush();
    sub.unsubscribe();
    expect(got).toHaveLength(2);
    expect(got[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(got[0]).toBe(got[1]);
    expect(pub.counters).toMatchObject({ timedOut: 1, noResponders: 0 });
  });

  it("a retry reuses the id: a lost ack comes back as `duplicate` of the applied first attempt", async () => {
    // Applies every command but drops the first reply, as if the ack were lost on the way back.
    const r = new ReferenceResponder({
      workerId: "lossy0",
      knownBlocks: KNOWN,
      log: quiet,
      record: true,
    });
    let dropped = 0;
    const sub = workerConn.subscribe("kv-control-lossy0", {
      callback: (_e, msg) => {
        const ack = r.handle(msg.data, msg.subject);
        if (dropped++ === 0) return;
        msg.respond(
          new TextEncoder().encode(JSON.stringify({ ...ack, missing: ack.missing.map(String) })),
        );
      },
    });
    await workerConn.flush();
    const pub = new ControlPublisher(pubConn, { timeoutMs: 150, retries: 2, backoffMs: 5 });
    const ack = await pub.send("lossy0", { type: "Cache", block_hashes: [111n], pin: true });
    sub.unsubscribe();
    expect(r.received.length).toBe(2);
    expect(r.received[0]!.id).toBe(r.received[1]!.id);
    expect(ack.status).toBe("duplicate");
    expect(ack.reason).toContain("first outcome: applied");
    expect(r.model.blocks.get(111n)!.pins).toBe(1);
    expect(pub.counters).toMatchObject({ sent: 1, retried: 1 });
  });

  it("a bounded in-flight window refuses locally when it and its queue are full", async () => {
    await responder("busy0", { delayMs: 200 });
    const pub = new ControlPublisher(pubConn, { maxInFlight: 2, maxQueued: 1, timeoutMs: 2000 });
    const sends = Array.from({ length: 4 }, () =>
      pub.send("busy0", EXAMPLE_COMMANDS.Inspect).then(
        (a) => a.status,
        (e: unknown) => e,
      ),
    );
    expect(pub.inFlight).toEqual({ active: 2, queued: 1 });
    const out = await Promise.all(sends);
    expect(out.filter((o) => o instanceof WindowFullError)).toHaveLength(1);
    expect(out.filter((o) => o === "applied")).toHaveLength(3);
    expect(pub.counters.rejectedLocally).toBe(1);
  });
});

describe("broadcast", () => {
  it("collects one ack per answering worker and names the silent one", async () => {
    const prefix = "kv-bcast";
    for (const w of ["b0", "b1", "b2"]) await responder(w, { subjectPrefix: prefix });
    await responder("b3", { subjectPrefix: prefix, silent: true });
    let broadcasts = 0;
    const sub = workerConn.subscribe(broadcastSubject(prefix), {
      callback: () => void broadcasts++,
    });
    await workerConn.flush();
    const pub = new ControlPublisher(pubConn, {
      subjectPrefix: prefix,
      workers: ["b0", "b1", "b2", "b3"],
    });
    const res = await pub.broadcast(
      { type: "Cache", block_hashes: [111n, 555n], pin: true },
      { deadlineMs: 300 },
    );
    // The command went out on the subject the silent worker listens on; it never answered and is
    // named silent at the deadline.
    await workerConn.flush();
    sub.unsubscribe();
    expect(broadcasts).toBe(1);
    expect(res.acks.map((a) => a.worker_id).sort()).toEqual(["b0", "b1", "b2"]);
    expect(
      res.acks.every((a) => a.id === res.id && a.status === "partial" && a.missing[0] === 555n),
    ).toBe(true);
    expect(res.silent).toEqual(["b3"]);
    expect(res.noResponders).toBe(false);
    expect(pub.counters).toMatchObject({ sent: 1, silentWorkers: 1 });
    expect(pub.counters.acked.partial).toBe(3);
  });

  it("returns as soon as every expected worker has answered", async () => {
    const prefix = "kv-bfast";
    for (const w of ["c0", "c1", "c2"]) await responder(w, { subjectPrefix: prefix });
    const pub = new ControlPublisher(pubConn, { subjectPrefix: prefix });
    // A deadline past the test's own timeout: the broadcast can only end by every worker answering.
    const res = await pub.broadcast(EXAMPLE_COMMANDS.Inspect, {
      deadlineMs: 600_000,
      workers: ["c0", "c1", "c2"],
    });
    expect(res.silent).toEqual([]);
    expect(res.acks).toHaveLength(3);
  });

  it("reports no responders as such", async () => {
    const pub = new ControlPublisher(pubConn, { subjectPrefix: "kv-empty", workers: ["x0"] });
    const res = await pub.broadcast(EXAMPLE_COMMANDS.Inspect, { deadlineMs: 2000 });
    expect(res.noResponders).toBe(true);
    expect(res.acks).toEqual([]);
    expect(res.silent).toEqual(["x0"]);
  });
});

describe("the responder never dies on a message", () => {
  const raw = async (body: string) =>
    decodeAck(
      (await pubConn.request("kv-control-raw0", new TextEncoder().encode(body), { timeout: 2000 }))
        .data,
    );
  const env = (command: unknown, extra: object = {}) =>
    JSON.stringify(
      {
        version: 1,
        id: "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10",
        issued_at_ms: 1,
        command,
        ...extra,
      },
      (_k, v) => (typeof v === "bigint" ? `${v}n` : v),
    );

  it.each([
    { name: "not JSON", body: "{nope", field: "body" },
    { name: "not an object", body: "[1,2,3]", field: "body" },
    { name: "unknown type", body: env({ type: "Flush" }), field: "command.type" },
    {
      name: "hash over int64",
      body: env({ type: "Cache", block_hashes: [1, 9223372036854775808n], pin: true }).replace(
        '"9223372036854775808"',
        "9223372036854775808",
      ),
      field: "command.block_hashes[1]",
    },
    {
      name: "negative TTL",
      body: env({ type: "Cache", block_hashes: [1], pin: true, ttl_seconds: -1 }),
      field: "command.ttl_seconds",
    },
    {
      name: "empty lease id",
      body: env({ type: "RevokeLease", lease_id: "" }),
      field: "command.lease_id",
    },
    {
      name: "mistyped field",
      body: env({ type: "Think", block_hashes: [1], transient: "yes" }),
      field: "command.transient",
    },
    {
      name: "missing field",
      body: env({ type: "ToolEnd", session_id: "s" }),
      field: "command.epoch",
    },
    {
      name: "unknown version",
      body: env({ type: "RevokeLease", lease_id: "l" }, { version: 9 }),
      field: "version",
    },
    {
      name: "list over the limit",
      body: env({
        type: "Think",
        block_hashes: new Array(MAX_LIST_ENTRIES + 1).fill(7),
        transient: true,
      }),
      field: "command.block_hashes",
    },
  ])("$name -> rejected naming $field", async ({ body, field }) => {
    if (!responders.some((r) => r.workerId === "raw0")) await responder("raw0");
    const ack = await raw(body.replace(/"(\d+)n"/g, "$1"));
    expect(ack.status).toBe("rejected");
    expect(ack.worker_id).toBe("raw0");
    expect(ack.reason).toContain(`${field}:`);
  });

  it("echoes the envelope id and type on a rejection when it can read them", async () => {
    const ack = await raw(env({ type: "Cache", block_hashes: [1], pin: "yes" }));
    expect(ack).toMatchObject({
      id: "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10",
      type: "Cache",
      status: "rejected",
    });
  });
});
