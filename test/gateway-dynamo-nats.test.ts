// The gateway's index fed by Dynamo's NATS event plane (`dynamo.events: "nats"`), on a real
// nats-server and a real gateway: Dynamo's envelopes are published on the subject Dynamo 1.6.1
// uses, as its workers publish them (the real worker on that plane is covered by
// test/dynamo-nats.test.ts). One subscription on the gateway's own NATS connection serves every
// member; a Dynamo worker the gateway does not front is skipped and makes nothing stale; a message
// that does not decode makes every member stale, counted by worker; a gateway whose NATS came up
// late subscribes when it connects; a "nats" worker with no NATS configured is refused by name.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Packr } from "msgpackr";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createGateway,
  type Gateway,
  GatewayConfigError,
  parseGatewayConfig,
} from "../src/gateway/index.js";
import { blockHashes } from "../src/hash/index.js";
import { dynamoBlockHashes } from "../src/hash/dynamo.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";
import { pollFor } from "./helpers/poll.js";

const packr = new Packr({ useRecords: false, int64AsType: "bigint", mapsAsObjects: true });
const PAGE = 4;
const W0 = 3404231588825800073n;
const W1 = 17n;
const OTHER = 99n;
const SUBJECT = "namespace.dynamo.component.backend.endpoint.generate.kv-events";

/** One Dynamo event batch as a worker publishes it on the NATS plane: the envelope, no frame header. */
function stored(worker: bigint, tokens: number[], seq: bigint): Uint8Array {
  const engine = Array.from(blockHashes(tokens, { pageSize: PAGE }));
  const local = Array.from(dynamoBlockHashes(tokens, { blockSize: PAGE }));
  const payload = packr.pack([
    {
      worker_id: worker,
      storage_tier: "device",
      residency_domain: "worker",
      dp_rank: 0,
      event: {
        event_id: Number(seq),
        data: {
          stored: {
            parent_hash: null,
            blocks: engine.map((h, i) => ({
              block_hash: BigInt.asUintN(64, h),
              tokens_hash: local[i],
            })),
          },
        },
      },
    },
  ]);
  return packr.pack({
    publisher_id: worker,
    sequence: seq,
    published_at: 1,
    topic: "kv-events",
    payload,
  });
}

const tokens = (start: number, n: number) => Array.from({ length: n }, (_, i) => start + i);
const metricValue = async (g: Gateway, re: RegExp) =>
  Number(re.exec(await (await fetch(`${g.url}/metrics`)).text())?.[1] ?? Number.NaN);

describe("gateway index from Dynamo's NATS event plane (real nats-server, real gateway)", () => {
  let dir: string;
  let nats: NatsServer;
  let nc: NatsConnection;
  let g: Gateway;
  const logs: string[] = [];
  const gateways: Gateway[] = [];

  const gateway = async (url: string, log: string[]) => {
    const gw = await createGateway({
      config: {
        listen: { host: "127.0.0.1", port: 0 },
        workers: [
          {
            id: "w0",
            url: "http://127.0.0.1:9",
            dynamo: { events: "nats", workerId: W0.toString(), blockSize: PAGE },
          },
          {
            id: "w1",
            url: "http://127.0.0.1:9",
            dynamo: { events: "nats", workerId: W1.toString(), blockSize: PAGE },
          },
        ],
        nats: { url, opTimeoutMs: 5000 },
        sessions: { bucket: "dynamo_nats_sessions", inspectMs: 0 },
        health: { intervalMs: 600_000, timeoutMs: 5000, failures: 3 },
        probeWorkers: false,
      },
      log: (l) => log.push(l),
    });
    gateways.push(gw);
    return gw;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "kvctl-gw-dynamo-nats-"));
    nats = await startNatsServer(["-js", "-sd", dir]);
    nc = await connect({ servers: nats.url });
    g = await gateway(nats.url, logs);
    await pollFor(
      "the gateway's NATS link",
      () => logs.some((l) => l.includes("NATS connected")),
      (ok) => ok,
      { everyMs: 50 },
    );
  }, 60_000);

  afterAll(async () => {
    for (const gw of gateways) await gw.close();
    await nc?.close();
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Publishes until the gateway shows it (the subscription's readiness is the index itself). */
  const publishUntil = async (what: string, data: () => Uint8Array, ok: () => boolean) =>
    pollFor(
      what,
      () => {
        nc.publish(SUBJECT, data());
        return ok();
      },
      (v) => v,
      { everyMs: 50, detail: () => `log: ${logs.slice(-5).join(" | ")}` },
    );

  it("each member's blocks reach the index under its kvctl id; another deployment's worker is skipped, nothing stale", async () => {
    const a = Array.from(blockHashes(tokens(100, 4 * PAGE), { pageSize: PAGE }));
    const b = Array.from(blockHashes(tokens(500, 2 * PAGE), { pageSize: PAGE }));
    const c = Array.from(blockHashes(tokens(900, 2 * PAGE), { pageSize: PAGE }));
    let seq = 0n;
    await publishUntil(
      "w0's blocks in the index",
      () => stored(W0, tokens(100, 4 * PAGE), ++seq),
      () => a.every((h) => g.index.lookup(h)?.residency.get("w0")?.includes("GPU")),
    );
    nc.publish(SUBJECT, stored(OTHER, tokens(900, 2 * PAGE), ++seq));
    await publishUntil(
      "w1's blocks in the index",
      () => stored(W1, tokens(500, 2 * PAGE), ++seq),
      () => b.every((h) => g.index.lookup(h)?.residency.get("w1")?.includes("GPU")),
    );
    // NATS delivers one subscriber's messages in order: the other worker's came before w1's.
    expect(
      logs.some((l) =>
        l.includes(
          `Dynamo worker ${OTHER} publishes on the NATS event plane but is none of this gateway's workers`,
        ),
      ),
    ).toBe(true);
    expect(c.some((h) => g.index.lookup(h) !== undefined)).toBe(false);
    expect(g.index.lookup(a[0])?.residency.get("w1")).toBeUndefined();
    expect(g.index.workers().sort()).toEqual(["w0", "w1"]);
    const metrics = await (await fetch(`${g.url}/metrics`)).text();
    expect(metrics).toMatch(/kvctl_gateway_worker_index_stale\{worker="w0"\} 0/);
    expect(metrics).toMatch(/kvctl_gateway_worker_index_stale\{worker="w1"\} 0/);
    expect(metrics).not.toMatch(/kvctl_gateway_dynamo_event_problems_total\{/);
  });

  it("a late NATS: a gateway started before its NATS server subscribes once it connects", async () => {
    const late = await startNatsServer(["-js", "-sd", join(dir, "late")]);
    await late.stop();
    const log: string[] = [];
    const gw = await gateway(late.url, log);
    expect(log.some((l) => l.includes("NATS unavailable"))).toBe(true);
    await late.restart();
    const lc = await connect({ servers: late.url });
    try {
      const a = Array.from(blockHashes(tokens(1300, 2 * PAGE), { pageSize: PAGE }));
      let seq = 0n;
      await pollFor(
        "w0's blocks through the late connection",
        () => {
          lc.publish(SUBJECT, stored(W0, tokens(1300, 2 * PAGE), ++seq));
          return a.every((h) => gw.index.lookup(h)?.residency.get("w0")?.includes("GPU"));
        },
        (v) => v,
        { everyMs: 100, ms: 30_000, detail: () => `log: ${log.slice(-5).join(" | ")}` },
      );
    } finally {
      await lc.close();
      await late.stop();
    }
  }, 60_000);

  it("bad input: a message that does not decode makes every member stale, counted by worker; the stream goes on", async () => {
    nc.publish(SUBJECT, new Uint8Array([0xc1, 2, 3]));
    await pollFor(
      "both workers stale",
      () => metricValue(g, /kvctl_gateway_worker_index_stale\{worker="w1"\} (\d+)/),
      (v) => v === 1,
      { everyMs: 50 },
    );
    expect(await metricValue(g, /kvctl_gateway_worker_index_stale\{worker="w0"\} (\d+)/)).toBe(1);
    expect(
      await metricValue(
        g,
        /kvctl_gateway_dynamo_event_problems_total\{worker="w0",kind="decode"\} (\d+)/,
      ),
    ).toBe(1);
    expect(
      await metricValue(
        g,
        /kvctl_gateway_dynamo_event_problems_total\{worker="w1",kind="decode"\} (\d+)/,
      ),
    ).toBe(1);
    expect(
      logs.some((l) =>
        l.startsWith(
          "gateway: worker w0: Dynamo KV events (NATS plane): decode: undecodable Dynamo KV-event message",
        ),
      ),
    ).toBe(true);
    const a = Array.from(blockHashes(tokens(1700, 2 * PAGE), { pageSize: PAGE }));
    let seq = 100n;
    await publishUntil(
      "w0's later blocks",
      () => stored(W0, tokens(1700, 2 * PAGE), ++seq),
      () => a.every((h) => g.index.lookup(h)?.residency.get("w0")?.includes("GPU")),
    );
  });

  it('bad config: a "nats" worker with no NATS, or an events value that is neither, is refused by name', async () => {
    const w = (events: string) => ({
      listen: { port: 0 },
      workers: [{ id: "w0", url: "http://127.0.0.1:9", dynamo: { events, workerId: "1" } }],
    });
    expect(() => parseGatewayConfig(w("nats"))).toThrow(GatewayConfigError);
    expect(() => parseGatewayConfig(w("nats"))).toThrow(
      /workers\.0\.dynamo\.events: "nats" reads Dynamo's NATS event plane on the gateway's NATS connection, and no nats is configured/,
    );
    expect(() => parseGatewayConfig(w("udp://x:1"))).toThrow(
      /workers\.0\.dynamo\.events: must be tcp:\/\/host:port or "nats"/,
    );
    expect(
      parseGatewayConfig({ ...w("nats"), nats: { url: nats.url } }).workers[0].dynamo?.events,
    ).toBe("nats");
  });
});
