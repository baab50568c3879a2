// Dynamo's NATS event plane read by kvctl, all real on CPU: a nats-server, one stock
// `dynamo.sglang` worker (Dynamo 1.6.1) and Dynamo's frontend, both with `--event-plane nats`
// (the worker's KV events go over NATS, not ZMQ: its discovery record lists no ZMQ channel).
// `kvctl watch --dynamo-nats` shows the worker's relayed blocks under its kvctl id; a message on
// the subject that does not decode is reported by name and counted as bad, and the stream goes on.
// A kvctl gateway whose worker w0 takes its events from that plane (`dynamo.events: "nats"`, on the
// gateway's own NATS connection) routes a returning prompt on the overlap they put in its index.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Observation } from "../src/contract/observations.js";
import { readDynamoDiscovery } from "../src/events/dynamo/discovery.js";
import { createGateway, type Gateway } from "../src/gateway/index.js";
import { blockHashes } from "../src/hash/index.js";
import { packageRoot } from "../src/paths.js";
import {
  complete,
  type DynamoFrontend,
  type DynamoWorker,
  dynamoInstalled,
  MODEL_NAME,
  tinyModel,
  startDynamoFrontend,
  startDynamoWorker,
} from "./helpers/dynamo.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";
import { pollFor } from "./helpers/poll.js";
import { randomTokens, tokens } from "./helpers/sglang-server.js";

const PAGE = 16;

if (!dynamoInstalled())
  throw new Error("Dynamo is not installed: run python/setup_venv.sh (KVCTL_DYNAMO=0 skips it)");

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
    // JetStream for the gateway's session bucket (the gateway below reads the plane on its own link).
    nats = await startNatsServer(["-js", "-sd", join(dir, "js")]);
    const env = { DYN_EVENT_PLANE: "nats", NATS_SERVER: nats.url };
    const plane = ["--event-plane", "nats"];
    worker = await startDynamoWorker({
      name: "worker",
      entry: "stock",
      tree: null,
      model: tinyModel(),
      discovery,
      dir: join(dir, "w"),
      pageSize: PAGE,
      extraArgs: plane,
      env,
    });
    fe = await startDynamoFrontend({
      name: "frontend",
      discovery,
      dir: join(dir, "fe"),
      routerMode: "kv",
      extraArgs: plane,
      env,
    });
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
    const args = [
      "--import",
      "tsx",
      join(packageRoot, "src/cli/bin.ts"),
      "watch",
      "--dynamo-nats",
      nats.url,
      "--dynamo-worker",
      `${worker.dynamoId}=w0:${PAGE}`,
      "--json",
      "--interval",
      "1",
    ];
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
      for (let i = 0; !((w0()?.GPU ?? 0) >= 3) && i < 200 && p.exitCode === null; i++)
        await complete(fe.baseUrl, randomTokens(90_000 + i, 48), 1);
      expect(w0()?.GPU, err).toBeGreaterThanOrEqual(3);
      expect(w0()?.bad).toBe(0);
      // A message on the subject that is not Dynamo's envelope.
      nc.publish(
        "namespace.dynamo.component.backend.endpoint.generate.kv-events",
        new Uint8Array([1, 2, 3]),
      );
      await nc.flush();
      await printed("the decode error", () =>
        /Dynamo decode: undecodable Dynamo KV-event message/.test(err),
      );
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

  it("a gateway's index from the NATS plane: a returning prompt is routed on the overlap the worker's events put there", async () => {
    const seen: Observation[] = [];
    const logs: string[] = [];
    let g: Gateway | null = null;
    try {
      g = await createGateway({
        config: {
          listen: { host: "127.0.0.1", port: 0 },
          workers: [
            {
              id: "w0",
              url: fe.baseUrl,
              dynamo: { events: "nats", workerId: worker.dynamoId, blockSize: PAGE },
            },
          ],
          nats: { url: nats.url, opTimeoutMs: 5000 },
          sessions: { bucket: "dynamo_nats_gateway", inspectMs: 0 },
          health: { intervalMs: 600_000, timeoutMs: 30_000, failures: 5 },
        },
        policy: { name: "record", observe: (o) => (seen.push(o), []) },
        log: (l) => logs.push(l),
      });
      const gw = g;
      const send = async (prompt: number[]) => {
        // Streamed: Dynamo's frontend refuses the return_token_ids a whole answer would carry.
        const r = await fetch(`${gw.url}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: MODEL_NAME,
            prompt,
            max_tokens: 2,
            temperature: 0,
            stream: true,
          }),
        });
        expect(r.status, await r.text()).toBe(200);
        await gw.settled();
      };
      const prompt = tokens(7000, 5 * PAGE);
      const want = Array.from(blockHashes(prompt, { pageSize: PAGE })).slice(0, 4);
      // The subscription's readiness is the index itself: send until the prompt's blocks are there.
      await pollFor(
        "the worker's NATS-plane events in the gateway's index",
        async () => {
          await send(prompt);
          return want.every((h) => gw.index.lookup(h)?.residency.get("w0")?.includes("GPU"));
        },
        (ok) => ok,
        { everyMs: 200, ms: 120_000, detail: () => `log: ${logs.slice(-5).join(" | ")}` },
      );
      const before = seen.length;
      await send(prompt);
      const turn = seen
        .slice(before)
        .find((o): o is Extract<Observation, { type: "TurnStarted" }> => o.type === "TurnStarted");
      expect(turn?.worker).toBe("w0");
      expect(turn?.overlap?.GPU).toBeGreaterThanOrEqual(4);
      expect(turn?.promptBlocks?.slice(0, 4)).toEqual(want);
      const metrics = await (await fetch(`${gw.url}/metrics`)).text();
      expect(metrics).toMatch(/kvctl_gateway_worker_index_stale\{worker="w0"\} 0/);
    } finally {
      await g?.close();
    }
  }, 300_000);
});
