// The gateway in front of two real patched SGLang servers on CPU (the tiny model) with a real
// nats-server running JetStream: answers are the worker's bytes, sessions and KV-aware routing
// land on the worker holding the blocks, the session record's hashes are the ones the worker
// published, two replicas share sessions (leases intact), and a worker killed mid-stream gives the
// client a clean error while the next request goes to the other worker.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KvEventConsumer } from "../src/events/consumer.js";
import {
  createGateway,
  type Gateway,
  type GatewayPolicy,
  type Observation,
} from "../src/gateway/index.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let nats: NatsServer;
let jsDir: string;
const servers: SglangServer[] = [];
const published = new Map<string, Set<bigint>>();
const consumers: KvEventConsumer[] = [];
const gateways: Gateway[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-gw-js-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  const started = await Promise.all(
    ["w0", "w1"].map((id) =>
      startSglangServer({
        natsUrl: nats.url,
        workerId: id,
        storageDir: "",
        readyTimeoutS: 540,
        extraArgs: ["--enable-cache-report"],
      }),
    ),
  );
  servers.push(...started);
  // What each worker publishes, seen by a subscriber of our own (not the gateway's).
  for (const s of servers) {
    const set = new Set<bigint>();
    published.set(s.info.worker_id, set);
    const c = new KvEventConsumer({
      endpoint: s.info.events_endpoint as string,
      worker: s.info.worker_id,
      log: () => undefined,
    });
    c.on("batch", ({ batch }) => {
      for (const e of batch.events)
        if (e.type === "BlockStored") for (const h of e.blockHashes) set.add(h);
    });
    await c.start();
    consumers.push(c);
  }
}, 600_000);

afterAll(async () => {
  for (const g of gateways) await g.close().catch(() => undefined);
  for (const c of consumers) await c.close();
  await Promise.all(servers.map((s) => s.stop()));
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

/** Leases each finished session turn on its worker (a real command, acked by the worker's subscriber). */
function leasingPolicy(seen: Observation[]): GatewayPolicy {
  return {
    name: "test-lease",
    observe(o) {
      seen.push(o);
      if (o.type !== "TurnFinished" || !o.sessionId || o.chain.length === 0) return [];
      return [
        {
          worker: o.worker,
          reason: "test lease",
          sessionId: o.sessionId,
          command: {
            type: "Pause",
            block_hashes: o.chain.slice(0, 1),
            ttl_seconds: 120,
            lease_id: `lease-${o.sessionId}`,
          },
        },
      ];
    },
  };
}

async function gateway(
  seen: Observation[],
  decisions: Record<string, unknown>[],
): Promise<Gateway> {
  const g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: servers.map((s) => ({ id: s.info.worker_id, url: s.baseUrl })),
      nats: { url: nats.url, opTimeoutMs: 5000 },
      sessions: { bucket: "gw_test_sessions", idleAfterSeconds: 0 },
      // SGLang's /health runs a one-token generation (a second at least, more on a loaded box).
      health: { intervalMs: 1000, timeoutMs: 15_000, failures: 3 },
      jsonLog: true,
    },
    policy: leasingPolicy(seen),
    decisionLog: (l) => decisions.push(JSON.parse(l)),
    log: () => undefined,
  });
  gateways.push(g);
  return g;
}

// Per-request fields: ids, timestamps, and how much of the prompt the worker's cache already held.
const norm = (s: string) =>
  s
    .replace(/"id":"[^"]*"/g, '"id":"X"')
    .replace(/"created":\d+/g, '"created":0')
    .replace(/"cached_tokens":\d+/g, '"cached_tokens":0');

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string; worker: string | null }> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text(), worker: r.headers.get("x-kvctl-worker") };
}

function chat(turn: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  const messages = [{ role: "system", content: "You are a terse test assistant. ".repeat(6) }];
  turn.forEach((t, i) => {
    messages.push({ role: i % 2 ? "assistant" : "user", content: t });
  });
  return { messages, max_tokens: 8, temperature: 0, ignore_eos: true, ...extra };
}

const seenA: Observation[] = [];
const decisionsA: Record<string, unknown>[] = [];
let gwA: Gateway;

describe("gateway in front of real SGLang workers", () => {
  it("reads each worker's scheme and serves non-streaming chat byte for byte as the worker does", async () => {
    gwA = await gateway(seenA, decisionsA);
    expect(
      seenA
        .filter((o) => o.type === "WorkerJoined")
        .map((o) => (o as { pageSize: number }).pageSize),
    ).toEqual([16, 16]);
    const body = chat(["Say something about caches."]);
    const via = await post(`${gwA.url}/v1/chat/completions`, body);
    expect(via.status).toBe(200);
    const worker = servers.find((s) => s.info.worker_id === via.worker) as SglangServer;
    const direct = await post(`${worker.baseUrl}/v1/chat/completions`, body);
    expect(norm(via.text)).toBe(norm(direct.text));
    expect(via.text).not.toContain("token_ids");
    // The client's own request for ids is honoured (and nothing else added).
    const asked = await post(`${gwA.url}/v1/chat/completions`, {
      ...body,
      return_prompt_token_ids: true,
    });
    expect(asked.text).toContain('"prompt_token_ids"');
    expect(asked.text).not.toContain("response_token_ids");
  }, 120_000);

  it("streams chat through unchanged", async () => {
    const body = chat(["Stream a short answer."], { stream: true });
    const via = await post(`${gwA.url}/v1/chat/completions`, body);
    const worker = servers.find((s) => s.info.worker_id === via.worker) as SglangServer;
    const direct = await post(`${worker.baseUrl}/v1/chat/completions`, body);
    expect(via.status).toBe(200);
    // SGLang's detokenizer groups tokens into chunks by timing, so two runs of one request differ
    // in where chunks split (direct vs direct too). Compared: every event byte for byte once its
    // content is blanked, and the content joined.
    const events = (t: string) =>
      norm(t)
        .split("\n\n")
        .filter((e) => e !== "");
    const content = (t: string) =>
      events(t)
        .map((e) => /"content":"((?:[^"\\]|\\.)*)"/.exec(e)?.[1] ?? "")
        .join("");
    const shapes = (t: string) => [
      ...new Set(events(t).map((e) => e.replace(/"content":"(?:[^"\\]|\\.)*"/, '"content":""'))),
    ];
    expect(events(via.text).length).toBeGreaterThan(3);
    expect(events(via.text).at(-1)).toBe("data: [DONE]");
    expect(content(via.text)).toBe(content(direct.text));
    expect(shapes(via.text)).toEqual(shapes(direct.text));
    expect(events(via.text).at(-2)).toBe(events(direct.text).at(-2));
  }, 120_000);

  it("keeps a session on its worker and records the block hashes the worker published", async () => {
    const h = { "x-session-id": "sess-A" };
    const t1 = await post(
      `${gwA.url}/v1/chat/completions`,
      chat(["First turn of session A, about radix trees."]),
      h,
    );
    expect(t1.status).toBe(200);
    await gwA.settled();
    const rec = await gwA.sessions.get("sess-A");
    expect(rec?.worker).toBe(t1.worker);
    expect(rec?.turns[0].promptBlocks).toBeGreaterThan(2);
    // Token ranges from the worker: the system prompt is a prefix; output follows the prompt.
    const r1 = rec?.turns[0].ranges;
    expect(r1?.system?.start).toBe(0);
    expect(r1?.system?.end).toBeGreaterThan(16);
    expect(r1?.prompt.end).toBeGreaterThan(r1?.system?.end as number);
    expect(r1?.output).toEqual({ start: r1?.prompt.end, end: (r1?.prompt.end as number) + 8 });
    const fin = seenA.find((o) => o.type === "TurnFinished" && o.sessionId === "sess-A");
    expect(fin).toMatchObject({ finishReason: "length", usage: { completionTokens: 8 } });
    const mine = published.get(t1.worker as string) as Set<bigint>;
    const chain = (rec?.chain ?? []).map((x) => BigInt(x));
    // Every prompt page is in the worker's radix tree and was published as a BlockStored.
    const deadline = Date.now() + 20_000;
    while (
      Date.now() < deadline &&
      !chain.slice(0, rec?.turns[0].promptBlocks).every((x) => mine.has(x))
    )
      await new Promise((r) => setTimeout(r, 50));
    for (const x of chain.slice(0, rec?.turns[0].promptBlocks)) expect(mine.has(x)).toBe(true);
    // The policy's lease went to the worker and came back acked; the record keeps both.
    expect(rec === null).toBe(false);
    await gwA.settled();
    const rec2 = await gwA.sessions.get("sess-A");
    expect(rec2?.commands.map((c) => [c.type, c.worker])).toEqual([["Pause", t1.worker]]);
    expect(rec2?.commands[0].state).toBe("applied");
    expect(rec2?.leases.map((l) => l.leaseId)).toEqual(["lease-sess-A"]);

    const t2 = await post(
      `${gwA.url}/v1/chat/completions`,
      chat(["First turn of session A, about radix trees.", "ok", "Second turn."]),
      h,
    );
    expect(t2.worker).toBe(t1.worker);
    await gwA.settled();
    const t2rec = await gwA.sessions.get("sess-A");
    // Turn 2 repeats turn 1's prompt: its history range covers those pages.
    expect(t2rec?.turns[1].ranges?.history.end).toBeGreaterThanOrEqual(
      (rec?.turns[0].promptBlocks as number) * 16 - 16,
    );
    expect(t2rec?.turns[1].usage.cachedTokens).toBeGreaterThan(0);
    const reasons = decisionsA
      .filter((d) => d.session === "sess-A" && d.event === "route")
      .map((d) => d.reason);
    expect(reasons).toHaveLength(2);
    expect(reasons[1]).toBe("session");
  }, 120_000);

  it("learns an Anthropic /v1/messages prompt's token ids from the worker and records the hashes it published", async () => {
    const h = { "x-session-id": "sess-M" };
    const body = {
      model: "default",
      max_tokens: 4,
      temperature: 0,
      system: "You are a terse test assistant. ".repeat(6),
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "An Anthropic-shaped turn about radix trees and pages." },
          ],
        },
      ],
    };
    const r = await post(`${gwA.url}/v1/messages`, body, h);
    expect(r.status).toBe(200);
    // Anthropic's input_tokens leaves out what the cache served: the prompt is both together.
    const usage = (
      JSON.parse(r.text) as { usage: { input_tokens: number; cache_read_input_tokens?: number } }
    ).usage;
    const inputTokens = usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
    await gwA.settled();
    const rec = await gwA.sessions.get("sess-M");
    expect(rec?.worker).toBe(r.worker);
    // As many full pages as the worker counted prompt tokens: the ids are the ones it served.
    expect(rec?.turns[0].promptBlocks).toBe(Math.floor(inputTokens / 16));
    expect(rec?.turns[0].promptBlocks).toBeGreaterThan(2);
    const mine = published.get(r.worker as string) as Set<bigint>;
    const chain = (rec?.chain ?? []).map((x) => BigInt(x)).slice(0, rec?.turns[0].promptBlocks);
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && !chain.every((x) => mine.has(x)))
      await new Promise((res) => setTimeout(res, 50));
    for (const x of chain) expect(mine.has(x)).toBe(true);
  }, 120_000);

  it("routes a returning sessionless conversation to the worker holding its blocks (index overlap)", async () => {
    for (let i = 0; i < 3; i++) {
      const first = [
        `Conversation ${i} opens with a question about hashing pages of tokens, number ${i}.`,
      ];
      const seen = new Map(
        servers.map((s) => [s.info.worker_id, new Set(published.get(s.info.worker_id))]),
      );
      const a = await post(`${gwA.url}/v1/chat/completions`, chat(first));
      const holder = a.worker as string;
      // The pages the worker stored for it (our own subscriber), then the gateway's index has them too.
      const fresh = () =>
        [...(published.get(holder) as Set<bigint>)].filter((h) => !seen.get(holder)?.has(h));
      const inIndex = () => fresh().every((h) => gwA.index.lookup(h)?.residency.has(holder));
      const deadline = Date.now() + 30_000;
      while (Date.now() < deadline && (fresh().length === 0 || !inIndex()))
        await new Promise((r) => setTimeout(r, 50));
      const why = () =>
        JSON.stringify({
          i,
          holder,
          index: gwA.index.stats().workers,
          published: [...published].map(([w, x]) => [w, x.size]),
        });
      expect(fresh().length, why()).toBeGreaterThan(0);
      expect(inIndex(), why()).toBe(true);
      const b = await post(
        `${gwA.url}/v1/chat/completions`,
        chat([...first, "answer", "follow-up"]),
      );
      expect(b.worker).toBe(holder);
      const last = decisionsA.filter((d) => d.event === "route").at(-1) as Record<string, unknown>;
      expect(last.reason).toBe("cache");
      const o = last.overlap as Record<string, number>;
      expect(o.GPU + o.CPU_PINNED + o.DISK + o.EXTERNAL).toBeGreaterThan(2);
    }
  }, 180_000);

  it("shares sessions between replicas: a second gateway continues the session with its lease", async () => {
    const seenB: Observation[] = [];
    const decisionsB: Record<string, unknown>[] = [];
    const gwB = await gateway(seenB, decisionsB);
    const before = await gwA.sessions.get("sess-A");
    await gwA.close();
    const t3 = await post(
      `${gwB.url}/v1/chat/completions`,
      chat(["First turn of session A, about radix trees.", "ok", "Second turn.", "ok", "Third."]),
      { "x-session-id": "sess-A" },
    );
    expect(t3.status).toBe(200);
    expect(t3.worker).toBe(before?.worker);
    expect(decisionsB.at(-1)).toMatchObject({ session: "sess-A", reason: "session" });
    await gwB.settled();
    const after = await gwB.sessions.get("sess-A");
    expect(after?.turnCount).toBe(3);
    expect(after?.leases.map((l) => l.leaseId)).toEqual(["lease-sess-A"]);
    gwA = gwB;
  }, 120_000);

  it("a worker killed mid-stream gives the client a clean error; the next request goes elsewhere", async () => {
    const h = { "x-session-id": "sess-A" };
    const rec = await gwA.sessions.get("sess-A");
    const victim = servers.find((s) => s.info.worker_id === rec?.worker) as SglangServer;
    const res = await fetch(`${gwA.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...h },
      body: JSON.stringify(
        chat(["Keep talking."], { stream: true, max_tokens: 1500, ignore_eos: true }),
      ),
    });
    expect(res.headers.get("x-kvctl-worker")).toBe(victim.info.worker_id);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    const first = await reader.read();
    text += Buffer.from(first.value ?? []).toString();
    process.kill(-victim.info.pid, "SIGKILL");
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += Buffer.from(r.value).toString();
    }
    expect(text).toMatch(
      /data: \{"error":\{"message":"worker w\d failed mid-stream[^"]*","type":"upstream_error"/,
    );
    expect(text).not.toContain("[DONE]");
    const next = await post(`${gwA.url}/v1/chat/completions`, chat(["After the crash."]), h);
    expect(next.status).toBe(200);
    expect(next.worker).not.toBe(victim.info.worker_id);
    const metrics = await (await fetch(`${gwA.url}/metrics`)).text();
    expect(metrics).toContain(`kvctl_gateway_worker_healthy{worker="${victim.info.worker_id}"} 0`);
    expect(metrics).toMatch(
      /kvctl_gateway_routing_decisions_total\{worker="w\d",reason="(load|only)"\}/,
    );
  }, 120_000);
});
