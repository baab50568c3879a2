// The gateway's index fed by NVIDIA Dynamo's event plane, all real on CPU: one stock
// `dynamo.sglang` worker (Dynamo 1.6.1) behind Dynamo's frontend, and a kvctl gateway whose
// worker `w0` names that worker's Dynamo event-plane endpoint and Dynamo id (`dynamo:` in its
// config). A prompt sent twice through the gateway: the second is scored from the blocks Dynamo
// relayed (the overlap the gateway routed on, in its TurnStarted observation). A second gateway
// worker configured with a wrong Dynamo id on the same stream gets every event as unmapped:
// reported by name, counted, that worker stale, nothing applied to it, and w0's view unaffected.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Observation } from "../src/contract/observations.js";
import type { GatewayPolicy } from "../src/contract/policy.js";
import { readDynamoDiscovery } from "../src/events/dynamo/discovery.js";
import { createGateway, type Gateway } from "../src/gateway/index.js";
import { blockHashes } from "../src/hash/index.js";
import {
  type DynamoFrontend,
  type DynamoWorker,
  dynamoInstalled,
  tinyModel,
  MODEL_NAME,
  startDynamoFrontend,
  startDynamoWorker,
} from "./helpers/dynamo.js";
import { pollFor } from "./helpers/poll.js";
import { tokens } from "./helpers/sglang-server.js";

const PAGE = 16;
const WRONG_ID = "4242";

if (!dynamoInstalled())
  throw new Error("Dynamo is not installed: run python/setup_venv.sh (KVCTL_DYNAMO=0 skips it)");

describe("gateway index from Dynamo's event plane (real dynamo.sglang worker + frontend)", () => {
  let dir: string;
  let worker: DynamoWorker;
  let fe: DynamoFrontend;
  let g: Gateway;
  const seen: Observation[] = [];
  const logs: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "kvctl-gw-dynamo-"));
    const discovery = join(dir, "discovery");
    worker = await startDynamoWorker({
      name: "worker",
      entry: "stock",
      tree: null,
      model: tinyModel(),
      discovery,
      dir: join(dir, "w"),
      pageSize: PAGE,
    });
    fe = await startDynamoFrontend({
      name: "frontend",
      discovery,
      dir: join(dir, "fe"),
      routerMode: "kv",
    });
    const ch = readDynamoDiscovery(discovery).channels.find((c) => c.worker === worker.dynamoId);
    if (!ch) throw new Error("the worker's event channel is not in Dynamo's discovery folder");
    // Dynamo's PUB binds every interface and advertises the event-plane host; loopback reaches it.
    const events = ch.endpoint.replace(/\/\/[^:]+:/, "//127.0.0.1:");
    const policy: GatewayPolicy = { name: "record", observe: (o) => (seen.push(o), []) };
    g = await createGateway({
      config: {
        listen: { host: "127.0.0.1", port: 0 },
        workers: [
          {
            id: "w0",
            url: fe.baseUrl,
            dynamo: { events, workerId: worker.dynamoId, blockSize: PAGE },
          },
          { id: "w1", url: fe.baseUrl, dynamo: { events, workerId: WRONG_ID, blockSize: PAGE } },
        ],
        health: { intervalMs: 60_000, timeoutMs: 30_000, failures: 5 },
      },
      policy,
      log: (l) => logs.push(l),
    });
  }, 600_000);

  afterAll(async () => {
    await g?.close();
    await Promise.all([fe?.stop(), worker?.stop()]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  const complete = async (prompt: number[]) => {
    const r = await fetch(`${g.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      // Streamed: for a whole answer the gateway asks the worker for token ids (return_token_ids),
      // a field Dynamo's frontend refuses.
      body: JSON.stringify({
        model: MODEL_NAME,
        prompt,
        max_tokens: 2,
        temperature: 0,
        stream: true,
      }),
    });
    const body = await r.text();
    expect(r.status, body).toBe(200);
    await g.settled();
    return r.headers.get("x-kvctl-worker");
  };

  it("routes a returning prompt on the overlap Dynamo's events put in the index", async () => {
    const prompt = tokens(300, 5 * PAGE);
    const hashes = Array.from(blockHashes(prompt, { pageSize: PAGE }));
    await complete(prompt);
    // The worker stores the prompt's full blocks (the last token stays out of the cache); its
    // events reach the index through Dynamo's relay. The index is the readiness signal.
    const want = hashes.slice(0, 4);
    await pollFor(
      "Dynamo's events to put the prompt's blocks in the index",
      () => want.every((h) => g.index.lookup(h)?.residency.get("w0")?.includes("GPU")),
      (ok) => ok,
      {
        everyMs: 100,
        detail: () => `log: ${logs.slice(-5).join(" | ")}`,
      },
    );
    const before = seen.length;
    expect(await complete(prompt)).toBe("w0");
    const turn = seen
      .slice(before)
      .find((o): o is Extract<Observation, { type: "TurnStarted" }> => o.type === "TurnStarted");
    expect(turn?.worker).toBe("w0");
    expect(turn?.overlap?.GPU).toBeGreaterThanOrEqual(4);
    expect(turn?.promptBlocks?.slice(0, 4)).toEqual(want);
  }, 180_000);

  it("a Dynamo worker id with no mapping: named, counted, the worker stale, nothing applied to it", async () => {
    expect(
      logs.some(
        (l) =>
          l.includes(`Dynamo worker ${worker.dynamoId} has no kvctl worker mapping`) &&
          l.startsWith("gateway: worker w1"),
      ),
    ).toBe(true);
    const metrics = await (await fetch(`${g.url}/metrics`)).text();
    const m =
      /kvctl_gateway_dynamo_event_problems_total\{worker="w1",kind="unmapped_worker"\} (\d+)/.exec(
        metrics,
      );
    expect(Number(m?.[1])).toBeGreaterThan(0);
    expect(metrics).toMatch(/kvctl_gateway_worker_index_stale\{worker="w1"\} 1/);
    expect(metrics).toMatch(/kvctl_gateway_worker_index_stale\{worker="w0"\} 0/);
    expect(g.index.workers()).toEqual(["w0"]);
  });
});
