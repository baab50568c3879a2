// Dynamo's NATS event plane read by kvctl, all real on CPU: a nats-server, one stock
// `dynamo.sglang` worker (Dynamo 1.6.1) and Dynamo's frontend, both with `--event-plane nats`
// (the worker's KV events go over NATS, not ZMQ: its discovery record lists no ZMQ channel).
// `kvctl watch --dynamo-nats` shows the worker's relayed blocks under its kvctl id; a message on
// the subject that does not decode is reported by name and counted as bad, and the stream goes on.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readDynamoDiscovery } from "../src/events/dynamo/discovery.js";
import { packageRoot } from "../src/paths.js";
import { complete, type DynamoFrontend, type DynamoWorker, dynamoInstalled, tinyModel, startDynamoFrontend, startDynamoWorker } from "./helpers/dynamo.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";
import { randomTokens } from "./helpers/sglang-server.js";

const PAGE = 16;


if (!dynamoInstalled()) throw new Error("Dynamo is not installed: run python/setup_venv.sh (KVCTL_DYNAMO=0 skips it)");

describe("kvctl watch --dynamo-nats on Dynamo's NATS event plane (real nats-server, dynamo.sglang worker, frontend)", () => {
  let dir: string;
  let discovery: string;
  let nats: NatsServer;
  let worker: DynamoWorker;
  let fe: DynamoFrontend;
  let nc: NatsConnection;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "kvctl-dynamo-nats-"));
    discovery = join(dir, "discovery");
    nats = await startNatsServer();
    const env = { DYN_EVENT_PLANE: "nats", NATS_SERVER: nats.url };
    const plane = ["--event-plane", "nats"];
    worker = await startDynamoWorker({ name: "worker", entry: "stock", tree: null, model: tinyModel(), discovery, dir: join(dir, "w"), pageSize: PAGE, extraArgs: plane, env });
    fe = await startDynamoFrontend({ name: "frontend", discovery, dir: join(dir, "fe"), routerMode: "kv", extraArgs: plane, env });
    nc = await connect({ servers: nats.url });
  }, 600_000);

  afterAll(async () => {
    await nc?.close();
    await Promise.all([fe?.stop(), worker?.stop()]);
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  it("shows the worker's blocks under its kvctl id; an undecodable message is named and counted", async () => {
    // The worker publishes its KV events on NATS only.
    expect(readDynamoDiscovery(discovery).channels).toEqual([]);
    const args = ["--import", "tsx", join(packageRoot, "src/cli/bin.ts"), "watch", "--dynamo-nats", nats.url,
      "--dynamo-worker", `${worker.dynamoId}=w0:${PAGE}`, "--json", "--interval", "1"];
    const p: ChildProcess = spawn(process.execPath, args, { cwd: packageRoot });
    type Table = { workers: { worker: string; GPU: number; bad: number; events: number }[] };
    let err = "";
    const subscribed = new Promise<void>((resolve) =>
      p.stderr?.on("data", (d) => {
        err += d;
        if (err.includes("subscribed to namespace.*.component.*.endpoint.*.kv-events")) resolve();
      }),
    );
    const tables: Table[] = [];
    const lines = createInterface({ input: p.stdout! });
    lines.on("line", (l) => tables.push(JSON.parse(l) as Table));
    // Resolves once `ok` holds, looked at each time the watch prints (a table line or its stderr).
    const printed = (what: string, ok: () => boolean, ms = 30_000) =>
      new Promise<void>((resolve, reject) => {
        const look = () => {
          if (!ok()) return;
          stop();
          resolve();
        };
        const timer = setTimeout(() => {
          stop();
          reject(new Error(`timed out waiting for ${what}: ${err.slice(-500)}`));
        }, ms);
        const stop = () => {
          clearTimeout(timer);
          lines.off("line", look);
          p.stderr?.off("data", look);
        };
        lines.on("line", look);
        p.stderr?.on("data", look);
        look();
      });
    const w0 = () => tables.at(-1)?.workers.find((w) => w.worker === "w0");
    try {
      await subscribed;
      for (let i = 0; !((w0()?.GPU ?? 0) >= 3) && i < 200 && p.exitCode === null; i++) await complete(fe.baseUrl, randomTokens(90_000 + i, 48), 1);
      expect(w0()?.GPU, err).toBeGreaterThanOrEqual(3);
      expect(w0()?.bad).toBe(0);
      // A message on the subject that is not Dynamo's envelope.
      nc.publish("namespace.dynamo.component.backend.endpoint.generate.kv-events", new Uint8Array([1, 2, 3]));
      await nc.flush();
      await printed("the decode error", () => /Dynamo decode: undecodable Dynamo KV-event message/.test(err));
      expect(err).toMatch(/Dynamo decode: undecodable Dynamo KV-event message: (envelope|payload)/);
      // The stream goes on: new events are applied (counted, not block totals: a full pool evicts as it stores).
      const applied = w0()?.events ?? 0;
      await complete(fe.baseUrl, randomTokens(95_000, 48), 1);
      await printed("more events applied", () => (w0()?.events ?? 0) > applied);
      expect(w0()?.events ?? 0).toBeGreaterThan(applied);
    } finally {
      p.kill();
    }
  }, 600_000);
});
