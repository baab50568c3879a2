// Holds as pure functions: the session store runs a write's change again on every compare-and-set
// conflict, and what that write does outside the record (counters, log lines, commands sent,
// ownership) happens once, after the write is stored. Against a real nats-server (JetStream KV):
// before each of the ledger's or the recorder's writes, a rival writer puts the same record again,
// so the revision it read is stale and the bucket refuses the write (a real conflict, 7 or 8 in a
// row). And the heartbeat a replica writes is withdrawn when it stops holding nothing in flight.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type KV, Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PolicyCommand } from "../src/contract/policy.js";
import { CommandRecorder } from "../src/gateway/sessions/command-record.js";
import { HoldLedger } from "../src/gateway/sessions/holds/ledger.js";
import { HoldMetrics } from "../src/gateway/sessions/holds/metrics.js";
import { newSessionRecord, type SessionRecord } from "../src/gateway/sessions/holds/record.js";
import { lineLog } from "../src/gateway/core/logger.js";
import { GatewayMetrics } from "../src/gateway/telemetry/metrics.js";
import { SessionStore, sessionKey } from "../src/gateway/sessions/session-store.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";

let nats: NatsServer;
let jsDir: string;
let nc: NatsConnection;
let bucket: KV;

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-hold-effects-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  nc = await connect({ servers: nats.url });
  bucket = await new Kvm(nc).create("hold_effects", { history: 1 });
}, 60_000);

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
});

/** The bucket, with a rival that writes the record again just before each of the next `left` updates. */
function rivalled(kv: KV, rival: { left: number; writes: number }): KV {
  return new Proxy(kv, {
    get(target, prop) {
      if (prop === "update")
        return async (key: string, value: string, revision: number) => {
          if (rival.left > 0) {
            rival.left--;
            const e = await target.get(key);
            if (e) await target.put(key, e.value);
            rival.writes++;
          }
          return target.update(key, value, revision);
        };
      const v = Reflect.get(target, prop);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

function setup() {
  const rival = { left: 0, writes: 0 };
  const kv = rivalled(bucket, rival);
  const lines: string[] = [];
  const log = lineLog((l) => lines.push(l));
  const registry = new Registry();
  const sessions = new SessionStore({
    kv: () => kv,
    configured: true,
    opTimeoutMs: 5000,
    metrics: new GatewayMetrics(),
    log,
  });
  const sent: PolicyCommand[] = [];
  const unsent: string[] = [];
  let now = 1_000_000;
  const ledger = new HoldLedger({
    sessions,
    kv: () => kv,
    send: (pc) => sent.push(pc),
    unsent: (_pc, why) => unsent.push(why),
    clock: { now: () => now },
    metrics: new HoldMetrics(registry),
    log,
    heartbeatMs: 60_000,
    incarnation: () => null,
  });
  const recorder = new CommandRecorder({
    sessions,
    clock: { now: () => now },
    maxCommands: 100,
    observe: () => undefined,
    decisionLog: null,
    log,
    settle: (rec, pc, worker, res) => ledger.settleInto(rec, pc, worker, res),
  });
  const counted = async (name: string) =>
    (await registry.metrics())
      .split("\n")
      .filter((l) => l.startsWith(`${name}{`))
      .sort();
  const tick = (ms: number) => {
    now += ms;
  };
  return { rival, lines, sessions, sent, unsent, ledger, recorder, counted, tick };
}

const pin = (sid: string, blocks: bigint[]): PolicyCommand => ({
  worker: "w0",
  sessionId: sid,
  hold: "marker",
  reason: "x",
  command: { type: "Cache", block_hashes: blocks, pin: true, ttl_seconds: 60 },
});

/** Stores a record as another writer would (no ledger, no store). */
async function seed(rec: SessionRecord): Promise<void> {
  await bucket.put(sessionKey(rec.id), JSON.stringify(rec));
}

describe("a hold write that loses its compare-and-set 7 times, then lands", () => {
  it("counts and logs what the write did once: a hold it found expired, a record an older gateway wrote", async () => {
    const t = setup();
    // An older gateway's record (no holds, one pin), and one with a hold past its TTL.
    const legacy: SessionRecord = { ...newSessionRecord("legacy", 0) };
    delete legacy.holds;
    legacy.pins = [{ worker: "w0", blockHashes: ["7"], ttlSeconds: 600, atMs: 999_000 }];
    await seed(legacy);
    const stale = newSessionRecord("stale", 0);
    stale.holds = [
      {
        id: "old",
        kind: "marker",
        worker: "w0",
        incarnation: null,
        blocks: ["5"],
        releasing: [],
        leaseId: null,
        toolSession: null,
        epoch: null,
        replica: "gone",
        ttlSeconds: 60,
        expiresMs: 10,
        atMs: 0,
        state: "held",
      },
    ];
    await seed(stale);
    t.rival.left = 7;
    t.ledger.submit(pin("legacy", [1n]));
    await t.ledger.settled();
    t.rival.left = 7;
    t.ledger.submit(pin("stale", [2n]));
    await t.ledger.settled();
    // Not vacuous: every one of those writes lost 7 times to a real conflict before it landed.
    expect(t.rival.writes).toBe(14);
    expect(t.sent.map((pc) => pc.sessionId)).toEqual(["legacy", "stale"]);
    expect(await t.counted("kvctl_gateway_bad_records_total")).toEqual([
      'kvctl_gateway_bad_records_total{why="older_version"} 1',
    ]);
    expect(await t.counted("kvctl_gateway_holds_dropped_total")).toEqual([
      'kvctl_gateway_holds_dropped_total{kind="marker",why="expired"} 1',
    ]);
    expect(t.lines.filter((l) => /older gateway/.test(l))).toHaveLength(1);
    // The records hold what one write made of them: the adopted pin and the new one; the new one only.
    const legacyNow = await t.sessions.get("legacy");
    expect(legacyNow?.holds?.map((h) => [h.blocks, h.state])).toEqual([
      [["7"], "held"],
      [["1"], "sending"],
    ]);
    expect((await t.sessions.get("stale"))?.holds?.map((h) => h.blocks)).toEqual([["2"]]);
  });

  it("an outcome recorded after 7 lost writes counts its unsure ack once and settles its hold once", async () => {
    const t = setup();
    await seed(newSessionRecord("acked", 0));
    t.ledger.submit(pin("acked", [1n, 2n]));
    t.ledger.submit(pin("acked", [3n]));
    await t.ledger.settled();
    expect(t.sent).toHaveLength(2);
    const ack = (pc: PolicyCommand, status: "error" | "partial", affected: number) =>
      t.recorder.record(pc, {
        state: "acked",
        id: pc.id ?? null,
        acks: [
          {
            id: pc.id ?? null,
            worker_id: "w0",
            type: "Cache",
            status,
            requested: 2,
            affected,
            skipped: 0,
            missing: status === "partial" ? [2n] : [],
            reason: null,
            tiers: {},
            lease: null,
            epoch: null,
            elapsed_us: 0,
          },
        ],
      });
    t.rival.left = 7;
    ack(t.sent[0], "partial", 1);
    await Promise.all(t.recorder.pending);
    t.rival.left = 7;
    ack(t.sent[1], "error", 0);
    await Promise.all(t.recorder.pending);
    expect(t.rival.writes).toBe(14);
    expect(await t.counted("kvctl_gateway_hold_acks_unsure_total")).toEqual([
      'kvctl_gateway_hold_acks_unsure_total{type="Cache",status="error"} 1',
      'kvctl_gateway_hold_acks_unsure_total{type="Cache",status="partial"} 1',
    ]);
    expect(t.lines.filter((l) => /came back error/.test(l))).toHaveLength(1);
    const rec = await t.sessions.get("acked");
    expect(rec?.holds?.map((h) => [h.blocks, h.state])).toEqual([
      [["1"], "held"],
      [["3"], "doubt"],
    ]);
    expect(rec?.commands.map((c) => c.state)).toEqual(["partial", "error"]);
  });

  it("8 lost writes in a row: the hold is not named, its command not sent, and only the loss is counted", async () => {
    const t = setup();
    const stale = newSessionRecord("lost", 0);
    stale.holds = [];
    await seed(stale);
    t.rival.left = 8;
    t.ledger.submit(pin("lost", [1n]));
    await t.ledger.settled();
    expect(t.rival.writes).toBe(8);
    expect(t.sent).toEqual([]);
    expect(t.unsent).toEqual([expect.stringMatching(/8 conflicting writes/)]);
    expect(await t.counted("kvctl_gateway_bad_records_total")).toEqual([
      'kvctl_gateway_bad_records_total{why="update_lost"} 1',
    ]);
    expect((await t.sessions.get("lost"))?.holds).toEqual([]);
  });
});

describe("the replica heartbeat", () => {
  const heartbeat = async (replica: string) => {
    const e = await bucket.get(`r.${replica}`);
    return e?.operation === "PUT" && e.length > 0 ? e.json<{ sessions: string[] }>() : null;
  };

  it("is withdrawn when the replica stops holding nothing in flight", async () => {
    const t = setup();
    t.ledger.start();
    await t.ledger.tick();
    expect(await heartbeat(t.ledger.replica)).toEqual(expect.objectContaining({ sessions: [] }));
    await t.ledger.stop();
    expect(await heartbeat(t.ledger.replica)).toBeNull();
  });

  it("stays when it stops with an in-flight hold (another replica reaps what it names)", async () => {
    const t = setup();
    t.ledger.start();
    t.ledger.submit({ ...pin("busy", [4n]), hold: "inflight" });
    await t.ledger.settled();
    expect(t.sent).toHaveLength(1);
    await t.ledger.stop();
    expect(await heartbeat(t.ledger.replica)).toEqual(
      expect.objectContaining({ sessions: ["busy"] }),
    );
  });
});
