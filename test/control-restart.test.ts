// A nats-server restart in the middle of a command stream: both sides reconnect by themselves,
// and every command ends either acked or with a reported error: none is silently lost, none is
// applied twice.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ControlError, ControlPublisher } from "../src/control/index.js";
import { ReferenceResponder } from "../src/testing/index.js";
import type { Ack } from "../src/protocol/index.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";

let server: NatsServer;
let pubConn: NatsConnection;
let workerConn: NatsConnection;

const opts = () => ({ servers: server.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });

beforeAll(async () => {
  server = await startNatsServer();
  pubConn = await connect(opts());
  workerConn = await connect(opts());
});

afterAll(async () => {
  await pubConn?.close();
  await workerConn?.close();
  await server?.stop();
});

async function watchReconnects(
  nc: NatsConnection,
): Promise<{ count: number; first: Promise<void> }> {
  let reconnected = () => {};
  const seen = { count: 0, first: new Promise<void>((r) => (reconnected = r)) };
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type !== "reconnect") continue;
      seen.count++;
      reconnected();
    }
  })();
  return seen;
}

it("commands queued across a server restart are delivered or reported failed, never lost", async () => {
  const responder = await ReferenceResponder.start(workerConn, {
    workerId: "r0",
    knownBlocks: [1n, 2n, 3n],
    log: () => {},
    record: true,
  });
  const pubReconnects = await watchReconnects(pubConn);
  const workerReconnects = await watchReconnects(workerConn);
  const pub = new ControlPublisher(pubConn, {
    timeoutMs: 400,
    retries: 10,
    backoffMs: 50,
    maxBackoffMs: 400,
  });

  type Outcome = { n: number; issuedWhileDown: boolean; ack?: Ack; error?: unknown };
  const outcomes: Promise<Outcome>[] = [];
  let down = false;
  const N = 150;
  let outage: Promise<void> | null = null;
  const stream = (async () => {
    for (let n = 0; n < N; n++) {
      if (n === N / 3) {
        // The outage starts once a third of the commands are out, and ends when both clients
        // have reconnected to the restarted server (their own reconnect signal, not a timer).
        down = true;
        outage = (async () => {
          await server.restart(); // stop, then start again on the same port
          await Promise.all([pubReconnects.first, workerReconnects.first]);
          down = false;
        })();
      }
      const issuedWhileDown = down;
      outcomes.push(
        pub
          .send("r0", { type: "Cache", block_hashes: [1n, 2n, 3n, BigInt(-n)], pin: n % 2 === 0 })
          .then(
            (ack) => ({ n, issuedWhileDown, ack }),
            (error: unknown) => ({ n, issuedWhileDown, error }),
          ),
      );
      await new Promise((r) => setTimeout(r, 5)); // a steady stream, not synchronisation
    }
  })();

  await stream;
  await outage;
  const results = await Promise.all(outcomes);

  // Every command has an outcome, and it is one of the two allowed ones.
  expect(results).toHaveLength(N);
  const acked = results.filter((r) => r.ack);
  const failed = results.filter((r) => r.error);
  for (const f of failed) expect(f.error).toBeInstanceOf(ControlError);
  expect(acked.length + failed.length).toBe(N);
  // With 10 retries over a sub-second outage, everything should in fact get through, including
  // commands issued while the server was down (buffered by the client, or re-sent).
  expect(failed.map((f) => String(f.error))).toEqual([]);
  expect(results.some((r) => r.issuedWhileDown && r.ack)).toBe(true);
  for (const r of acked)
    expect(["applied", "partial", "noop", "duplicate"]).toContain(r.ack!.status);

  // Exactly-once application: each id reached the model at most once as a non-duplicate.
  const ids = acked.map((r) => r.ack!.id);
  expect(new Set(ids).size).toBe(N);
  const applied = responder.received.filter((x) => x.command !== null).map((x) => x.id);
  expect(new Set(applied).size).toBe(N);
  const nonDuplicate = applied.length - responder.stats.acked.duplicate;
  expect(nonDuplicate).toBe(N);

  expect(pubReconnects.count).toBeGreaterThanOrEqual(1);
  expect(workerReconnects.count).toBeGreaterThanOrEqual(1);
  const c = pub.counters;
  console.log(
    `restart: ${N} commands, ${results.filter((r) => r.issuedWhileDown).length} issued while down, retried ${c.retried}, duplicates ${c.acked.duplicate}`,
  );
  expect(c.sent).toBe(N);
  expect(c.acked.applied + c.acked.partial + c.acked.noop + c.acked.duplicate).toBe(N);
});

it("a command whose worker never comes back is reported failed with a distinct error", async () => {
  const pub = new ControlPublisher(pubConn, { timeoutMs: 100, retries: 2, backoffMs: 10 });
  await server.stop();
  const err = await pub.send("r0", { type: "Inspect" }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ControlError);
  expect((err as ControlError).attempts).toBe(3);
  await server.restart();
});
