// The gateway's own behaviour on bad input and failing parts, over real HTTP, a real nats-server
// (JetStream) and real ZMQ sockets. The upstream here is a stand-in for an SGLang worker's HTTP
// surface (a tiny node:http server): these tests need a worker that hangs, streams forever or
// disappears on cue, which the real server cannot be made to do; answers from the real server
// are tested in gateway-real-server.test.ts.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Publisher, Router } from "zeromq";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { encodeSeq, END_SEQ } from "../src/events/decode.js";
import { encodeBatch } from "../src/events/encode.js";
import { connect } from "@nats-io/transport-node";
import {
  createGateway,
  type Gateway,
  type GatewayConfigInput,
  type GatewayPolicy,
  type PolicyFactory,
} from "../src/gateway/index.js";
import { policiesConfigSchema } from "../src/contract/policies-config.js";
import { retentionFor } from "../src/policy/program-retention-setup.js";
import { blankAck, type CommandType, encodeAck } from "../src/protocol/index.js";
import { freePort } from "../src/util/net.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { until } from "./helpers/poll.js";
import {
  readJsonBody,
  sendJson,
  STAND_IN_SERVER_INFO,
  standInTokenize,
  standInTokens,
} from "./helpers/stand-in-http.js";
import { blockStored } from "./helpers/kv-events.js";

interface StandIn {
  url: string;
  /** Fields merged into its /server_info answer. */
  info: Record<string, unknown>;
  server: Server;
  healthy: boolean;
  aborted: number;
  requests: number;
  /** Requests to answer by closing the connection without a byte (a worker closing a kept-alive one). */
  resetNext: number;
  /** How long a non-streamed answer takes (ms). */
  delayMs: number;
}

/** Stand-in for an SGLang worker's HTTP surface (see the file comment). */
async function standIn(): Promise<StandIn> {
  const s: StandIn = {
    url: "",
    info: {},
    server: null as unknown as Server,
    healthy: true,
    aborted: 0,
    requests: 0,
    resetNext: 0,
    delayMs: 0,
  };
  s.server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readJsonBody(req);
    const json = (status: number, v: unknown) => sendJson(res, status, v);
    if (req.url === "/health") return json(s.healthy ? 200 : 503, {});
    if (req.url === "/server_info") return json(200, { ...STAND_IN_SERVER_INFO, ...s.info });
    if (req.url === "/v1/tokenize") return json(200, standInTokenize(body));
    // kvctl's Anthropic tokenize route, as a kvctl worker has it (the gateway probes it at start).
    if (req.url === "/kvctl/v1/messages/tokenize")
      return body.messages
        ? json(200, { tokens: standInTokens(JSON.stringify(body.messages)) })
        : json(400, {});
    if (req.method === "GET") return json(404, {});
    s.requests++;
    if (s.resetNext > 0) {
      s.resetNext--;
      req.socket.destroy();
      return;
    }
    if (req.url === "/generate") return; // never answers: the timeout test
    if (body.stream) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const t = setInterval(
        () => res.write(`data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n`),
        5,
      );
      res.on("close", () => {
        clearInterval(t);
        if (!res.writableEnded) s.aborted++;
      });
      return;
    }
    if (s.delayMs > 0) await new Promise((r) => setTimeout(r, s.delayMs));
    const ids = body.return_token_ids
      ? ',"prompt_token_ids":[1,2,3,4,5],"response_token_ids":[6]'
      : "";
    // A body with "tool": true is answered with a tool call (an agent's tool loop goes on).
    const finish = body.tool ? "tool_calls" : "stop";
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      `{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}${ids},"finish_reason":"${finish}"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}`,
    );
  });
  s.server.listen(0, "127.0.0.1");
  await once(s.server, "listening");
  s.url = `http://127.0.0.1:${(s.server.address() as AddressInfo).port}`;
  return s;
}

let nats: NatsServer;
let jsDir: string;
const upstreams: StandIn[] = [];
const gateways: Gateway[] = [];
const logs: string[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-gw-http-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  upstreams.push(await standIn(), await standIn());
}, 60_000);

afterEach(async () => {
  for (const g of gateways.splice(0)) await g.close();
});

afterAll(async () => {
  for (const u of upstreams) u.server.close();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
});

async function gw(
  extra: Partial<GatewayConfigInput> = {},
  policy?: GatewayPolicy | PolicyFactory,
  decisionLog?: (line: string) => void,
  clock?: { now(): number },
): Promise<Gateway> {
  const g = await createGateway({
    clock,
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: upstreams.map((u, i) => ({ id: `w${i}`, url: u.url })),
      health: { intervalMs: 60_000, timeoutMs: 1000, failures: 1 },
      sessions: { idleAfterSeconds: 0 },
      ...extra,
    },
    policy,
    log: (l) => logs.push(l),
    decisionLog,
  });
  gateways.push(g);
  return g;
}

const json = async (r: Response): Promise<any> => r.json();

const post = (url: string, body: string, headers: Record<string, string> = {}) =>
  fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });

async function metric(g: Gateway, name: string): Promise<string[]> {
  const text = await (await fetch(`${g.url}/metrics`)).text();
  return text.split("\n").filter((l) => l.startsWith(name));
}

describe("gateway: bad input gets a clear answer and changes nothing", () => {
  it("an unknown route answers in the caller's dialect: Anthropic's by path or by the SDK's version header", async () => {
    const g = await gw();
    const anthropicShape = {
      type: "error",
      error: { type: "not_found_error", message: "no route GET /v1/messages/nope" },
    };
    expect(await json(await fetch(`${g.url}/v1/messages/nope`))).toEqual(anthropicShape);
    const byHeader = await fetch(`${g.url}/v1/nope`, {
      headers: { "anthropic-version": "2023-06-01" },
    });
    expect(byHeader.status).toBe(404);
    expect(await json(byHeader)).toEqual({
      type: "error",
      error: { type: "not_found_error", message: "no route GET /v1/nope" },
    });
    expect(await json(await fetch(`${g.url}/v1/nope`))).toEqual({
      error: { message: "no route GET /v1/nope", type: "not_found", param: null, code: null },
    });
    // The gateway's own refusals on /v1/messages name Anthropic's types.
    const big = await post(`${g.url}/v1/messages`, "{}", { "x-session-id": "s".repeat(600) });
    expect(await json(big)).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error" },
    });
  });

  it("malformed JSON, a non-object body, a bad field, unknown routes and oversized bodies", async () => {
    const g = await gw({ limits: { bodyLimitBytes: 1024 } });
    const bad = await post(`${g.url}/v1/chat/completions`, '{"messages": [');
    expect(bad.status).toBe(400);
    expect((await json(bad)).error.message).toMatch(/request body is not valid JSON/);
    const arr = await post(`${g.url}/v1/chat/completions`, "[1]");
    expect(arr.status).toBe(400);
    expect((await json(arr)).error.message).toBe("request body must be a JSON object");
    const field = await post(
      `${g.url}/v1/chat/completions`,
      '{"messages":[],"prompt_cache_key":7}',
    );
    expect(await json(field)).toMatchObject({
      error: { param: "prompt_cache_key", message: "prompt_cache_key must be a string" },
    });
    const nf = await fetch(`${g.url}/v1/nope`, { method: "POST", body: "{}" });
    expect(nf.status).toBe(404);
    expect((await json(nf)).error.message).toBe("no route POST /v1/nope");
    const big = await post(
      `${g.url}/v1/chat/completions`,
      JSON.stringify({ messages: [{ role: "user", content: "x".repeat(2000) }] }),
    );
    expect(big.status).toBe(413);
    expect((await json(big)).error.message).toBe(
      "request body is larger than the limit of 1024 bytes",
    );
    // A body sent in chunks without a length is cut off at the limit just the same.
    const chunked = await fetch(`${g.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: new ReadableStream({
        start(c) {
          for (let i = 0; i < 4; i++)
            c.enqueue(new TextEncoder().encode(`{"pad":"${"y".repeat(400)}",`));
          c.close();
        },
      }),
      duplex: "half",
    } as RequestInit);
    expect(chunked.status).toBe(413);
    expect((await json(chunked)).error.message).toBe(
      "request body is larger than the limit of 1024 bytes",
    );
    const anthropic = await post(`${g.url}/v1/messages`, "{oops");
    expect(await json(anthropic)).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error" },
    });
    // The inference routes have their own front door (node:http); the hints route goes through
    // fastify. Both answer malformed and oversized bodies alike.
    const hintsBad = await post(`${g.url}/kvctl/v1/sessions/s1/events`, '{"messages": [');
    const chatBad = await post(`${g.url}/v1/chat/completions`, '{"messages": [');
    expect(hintsBad.status).toBe(400);
    expect(await json(hintsBad)).toEqual(await json(chatBad));
    const hintsBig = await post(
      `${g.url}/kvctl/v1/sessions/s1/events`,
      JSON.stringify({ event: "x".repeat(2000) }),
    );
    expect(hintsBig.status).toBe(413);
    expect((await json(hintsBig)).error).toEqual({
      message: "request body is larger than the limit of 1024 bytes",
      type: "invalid_request_error",
      param: null,
      code: null,
    });
    expect(upstreams.reduce((n, u) => n + u.requests, 0)).toBe(0);
    const counted = await metric(g, "kvctl_gateway_bad_requests_total");
    expect(counted).toEqual(
      expect.arrayContaining([
        'kvctl_gateway_bad_requests_total{reason="bad_json"} 4',
        'kvctl_gateway_bad_requests_total{reason="not_object"} 1',
        'kvctl_gateway_bad_requests_total{reason="bad_session_id"} 1',
        'kvctl_gateway_bad_requests_total{reason="unknown_route"} 1',
        'kvctl_gateway_bad_requests_total{reason="body_too_large"} 3',
      ]),
    );
  });

  it("strips the token ids it asked for and counts cache hits", async () => {
    const g = await gw();
    const r = await post(
      `${g.url}/v1/chat/completions`,
      '{"messages":[{"role":"user","content":"hi"}]}',
    );
    expect(await r.text()).toBe(
      '{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}',
    );
    await g.settled();
    expect((await metric(g, "kvctl_gateway_cache_hit_tokens_total")).join()).toMatch(/\} 4$/);
  });

  it("a client that disconnects mid-stream aborts the worker request", async () => {
    const g = await gw();
    const before = upstreams.reduce((n, u) => n + u.aborted, 0);
    const res = await post(`${g.url}/v1/chat/completions`, '{"stream":true,"messages":[]}');
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.cancel();
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && upstreams.reduce((n, u) => n + u.aborted, 0) === before)
      await new Promise((r) => setTimeout(r, 20));
    expect(upstreams.reduce((n, u) => n + u.aborted, 0)).toBe(before + 1);
    while (
      Date.now() < deadline &&
      (await metric(g, "kvctl_gateway_client_aborts_total")).length === 0
    )
      await new Promise((r) => setTimeout(r, 20));
    expect(await metric(g, "kvctl_gateway_client_aborts_total")).toEqual([
      'kvctl_gateway_client_aborts_total{route="chat"} 1',
    ]);
  });

  it("admission: a request past the worker's limit waits at the gateway until one ends; one whose client leaves while waiting never reaches the worker", async () => {
    const u = upstreams[0];
    const g = await gw({
      workers: [{ id: "w0", url: u.url }],
      admission: { maxRequestsPerWorker: 1 },
    });
    // Polls the gateway's own metrics: the condition polled is the readiness signal.
    const waiting = async () =>
      (await metric(g, 'kvctl_gateway_admission_waiting_requests{worker="w0"}'))[0] ?? "";
    const before = u.requests;
    const a = await post(`${g.url}/v1/chat/completions`, '{"stream":true,"messages":[]}');
    const readA = (a.body as ReadableStream<Uint8Array>).getReader();
    await readA.read();
    // b is routed to w0 but waits: w0 runs a.
    const bRes = post(`${g.url}/v1/chat/completions`, '{"stream":true,"messages":[]}');
    await until("b to wait", async () => (await waiting()).endsWith(" 1"));
    expect(u.requests).toBe(before + 1);
    // c waits behind b, and its client leaves: it never reaches the worker.
    const cAbort = new AbortController();
    const cRes = fetch(`${g.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"stream":true,"messages":[]}',
      signal: cAbort.signal,
    });
    await until("c to wait", async () => (await waiting()).endsWith(" 2"));
    cAbort.abort();
    await expect(cRes).rejects.toThrow();
    await until("c to leave the queue", async () => (await waiting()).endsWith(" 1"));
    // a ends: b goes to the worker, c never does.
    await readA.cancel();
    const b = await bRes;
    expect(b.status).toBe(200);
    const readB = (b.body as ReadableStream<Uint8Array>).getReader();
    await readB.read();
    expect(u.requests).toBe(before + 2);
    expect(await waiting()).toMatch(/ 0$/);
    expect(await metric(g, "kvctl_gateway_admission_queued_total")).toEqual([
      'kvctl_gateway_admission_queued_total{worker="w0"} 2',
    ]);
    await readB.cancel();
    expect(u.requests).toBe(before + 2);
  });

  it("program admission: a session whose reply was a tool call keeps its slot; its next request passes a newcomer waiting for it", async () => {
    const u = upstreams[0];
    const g = await gw({
      workers: [{ id: "w0", url: u.url }],
      admission: { mode: "program", maxRequestsPerWorker: 1, capacityTokensPerWorker: 100_000 },
    });
    const waiting = async () =>
      (await metric(g, 'kvctl_gateway_admission_waiting_requests{worker="w0"}'))[0] ?? "";
    const a1 = await post(
      `${g.url}/v1/chat/completions`,
      '{"tool":true,"messages":[{"role":"user","content":"a"}]}',
      { "x-session-id": "prog-a" },
    );
    expect(a1.status).toBe(200);
    await a1.text();
    // b, another session, waits: a holds the worker's one program slot while its tool runs.
    const bRes = post(
      `${g.url}/v1/chat/completions`,
      '{"messages":[{"role":"user","content":"b"}]}',
      { "x-session-id": "prog-b" },
    );
    const deadline = Date.now() + 10_000;
    while (!(await waiting()).endsWith(" 1")) {
      if (Date.now() > deadline) throw new Error("timed out waiting for b to queue");
      await new Promise((r) => setTimeout(r, 20));
    }
    // a comes back from its tool: served at once, ahead of b; its turn ends (no tool call).
    const a2 = await post(
      `${g.url}/v1/chat/completions`,
      '{"messages":[{"role":"user","content":"a"},{"role":"tool","content":"r"}]}',
      { "x-session-id": "prog-a" },
    );
    expect(a2.status).toBe(200);
    await a2.text();
    // Then b gets the slot.
    const b = await bRes;
    expect(b.status).toBe(200);
    await b.text();
    expect(await metric(g, "kvctl_gateway_admission_queued_total")).toEqual([
      'kvctl_gateway_admission_queued_total{worker="w0"} 1',
    ]);
  });

  it("program admission with retention: the tool boundary is one decision, counted with its outcome once the session comes back", async () => {
    const u = upstreams[0];
    const lines: string[] = [];
    // The agent policy's retention alone, with no rule sending a command (the stand-in acks none).
    const retentionOnly: PolicyFactory = (env) => ({
      name: "retention",
      observe: () => [],
      programRetention: retentionFor(policiesConfigSchema.parse({}), env.registry, env.decisionLog),
    });
    const g = await gw(
      {
        workers: [{ id: "w0", url: u.url }],
        jsonLog: true,
        admission: { mode: "program", maxRequestsPerWorker: 1, capacityTokensPerWorker: 100_000 },
      },
      retentionOnly,
      (l) => lines.push(l),
    );
    const a1 = await post(
      `${g.url}/v1/chat/completions`,
      '{"tool":true,"messages":[{"role":"user","content":"a"}]}',
      { "x-session-id": "ret-a" },
    );
    expect(a1.status).toBe(200);
    await a1.text();
    const decided = (await metric(g, "kvctl_program_retention_decisions_total")).filter((l) =>
      l.endsWith(" 1"),
    );
    expect(decided).toHaveLength(1);
    const action = /action="(\w+)"/.exec(decided[0])?.[1];
    const a2 = await post(
      `${g.url}/v1/chat/completions`,
      '{"messages":[{"role":"user","content":"a"},{"role":"tool","content":"r"}]}',
      { "x-session-id": "ret-a" },
    );
    expect(a2.status).toBe(200);
    await a2.text();
    const outcome = action === "let_go" ? "recomputed" : "hit";
    expect(await metric(g, "kvctl_program_retention_outcomes_total")).toEqual([
      `kvctl_program_retention_outcomes_total{worker="w0",action="${action}",outcome="${outcome}"} 1`,
    ]);
    const recorded = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "retention");
    expect(recorded.map((l) => l.outcome ?? "decided")).toEqual(["decided", outcome]);
    expect(recorded[1].actual_gap_seconds).toBeGreaterThanOrEqual(0);
  });

  it("a generation past the response timeout is a 504 naming the worker, marked not to be retried", async () => {
    const g = await gw({ limits: { upstreamResponseTimeoutMs: 300 } });
    const r = await post(`${g.url}/generate`, '{"text":"hi"}');
    expect(r.status).toBe(504);
    // The SDKs (OpenAI's, Anthropic's) read this header before their retry rule.
    expect(r.headers.get("x-should-retry")).toBe("false");
    expect((await json(r)).error).toMatchObject({
      type: "upstream_timeout",
      message: expect.stringMatching(/^worker w\d timed out$/),
    });
  });

  it("a non-streamed generation is not cut by the header timeout, which bounds only streamed and quick calls", async () => {
    const g = await gw({ limits: { upstreamHeadersTimeoutMs: 200 } });
    for (const u of upstreams) u.delayMs = 1500;
    try {
      const r = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}');
      expect(r.status).toBe(200);
      expect((await json(r)).choices[0].message.content).toBe("ok");
    } finally {
      for (const u of upstreams) u.delayMs = 0;
    }
  });

  it("with no response timeout and no grace, a worker that stops passing health is drained and its generations end", async () => {
    const g = await gw({
      health: { intervalMs: 60_000, timeoutMs: 1000, failures: 1, cutCallsAfterMs: 0 },
    });
    const sent = () => upstreams.reduce((n, u) => n + u.requests, 0);
    const before = sent();
    const pending = post(`${g.url}/generate`, '{"text":"hi"}');
    // The stand-in counts the request when it has read it (the readiness signal polled here).
    const deadline = Date.now() + 10_000;
    while (sent() === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    for (const u of upstreams) u.healthy = false;
    try {
      await g.checkHealth();
      const r = await pending;
      expect(r.status).toBe(502);
      expect((await json(r)).error.message).toMatch(
        /^worker w\d failed: worker w\d was drained while answering$/,
      );
    } finally {
      for (const u of upstreams) u.healthy = true;
      await g.checkHealth();
    }
  });

  it("a worker failing health takes no new traffic at once; its calls under way are cut only if it still fails after the grace", async () => {
    let now = 1_000_000;
    const g = await gw(
      { health: { intervalMs: 60_000, timeoutMs: 1000, failures: 1, cutCallsAfterMs: 10_000 } },
      undefined,
      undefined,
      { now: () => now },
    );
    const r = await post(`${g.url}/v1/chat/completions`, '{"messages":[],"stream":true}', {
      "x-session-id": "busy",
    });
    expect(r.status).toBe(200);
    const w = r.headers.get("x-kvctl-worker") as string;
    const up = upstreams[Number(w.slice(1))];
    const reader = (r.body as ReadableStream<Uint8Array>).getReader();
    const chunk = async () => (await reader.read()).done === false;
    const abortedBefore = up.aborted;
    try {
      // A late /health: drained (no new traffic), the stream goes on; it passes again and keeps going.
      up.healthy = false;
      await g.checkHealth();
      expect(
        (await json(await fetch(`${g.url}/health`))).workers.find((x: { id: string }) => x.id === w)
          .healthy,
      ).toBe(false);
      const other = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', {
        "x-session-id": "new-one",
      });
      expect(other.headers.get("x-kvctl-worker")).not.toBe(w);
      await other.text();
      now += 9_999;
      await g.checkHealth();
      expect(await chunk()).toBe(true);
      up.healthy = true;
      await g.checkHealth();
      now += 60_000;
      expect(await chunk()).toBe(true);
      // Failing again and still failing once the grace is over: the call is cut.
      up.healthy = false;
      await g.checkHealth();
      expect(await chunk()).toBe(true);
      now += 10_000;
      await g.checkHealth();
      let ended = false;
      for (let i = 0; i < 10_000 && !ended; i++)
        ended = await reader.read().then(
          (x) => x.done,
          () => true,
        );
      expect(ended).toBe(true);
      await until("the worker to see its call end", () => up.aborted > abortedBefore);
      expect(logs.join("\n")).toMatch(
        new RegExp(`worker ${w} still failing: its 1 calls under way end with 502`),
      );
    } finally {
      up.healthy = true;
      await g.checkHealth();
    }
  });

  it("a connection reset before any answer is sent again; the worker keeps its sessions and is not drained", async () => {
    const ends: string[] = [];
    const g = await gw(
      {},
      {
        name: "record",
        observe: (o) => (
          o.type === "TurnStarted"
            ? ends.push(`started ${o.requestId}`)
            : o.type === "TurnFinished"
              ? ends.push(`finished ${o.requestId} ${o.status}`)
              : 0,
          []
        ),
      },
    );
    const h = { "x-session-id": "reset-once" };
    const first = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', h);
    const w = first.headers.get("x-kvctl-worker") as string;
    await g.settled();
    const up = upstreams[Number(w.slice(1))];
    const before = up.requests;
    up.resetNext = 1;
    const r = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', h);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-kvctl-worker")).toBe(w);
    expect(up.requests - before).toBe(2); // the reset one, then the one answered
    // Each try's TurnStarted has its TurnFinished (the reset one unanswered), so a policy releases
    // what it took for the first before the second takes it again.
    await g.settled();
    const id = /^started (\S+)$/.exec(ends.at(-4) ?? "")?.[1];
    expect(ends.slice(-4)).toEqual([
      `started ${id}`,
      `finished ${id} 0`,
      `started ${id}`,
      `finished ${id} 200`,
    ]);
    expect(
      (await json(await fetch(`${g.url}/health`))).workers.every(
        (x: { healthy: boolean }) => x.healthy,
      ),
    ).toBe(true);
    expect((await metric(g, "kvctl_gateway_upstream_errors_total")).join()).toContain(
      `worker="${w}",kind="reset"} 1`,
    );
    // a worker that resets every try is not retried forever: the client gets a clear 502
    up.resetNext = 3;
    const bad = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', h);
    expect(bad.status).toBe(502);
    expect((await json(bad)).error.message).toMatch(
      /^worker w\d failed before answering \(connection reset: /,
    );
    up.resetNext = 0;
  });

  it("a worker failing health is drained; its session re-routes", async () => {
    const g = await gw();
    const h = { "x-session-id": "drain-me" };
    const first = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', h);
    const w = first.headers.get("x-kvctl-worker") as string;
    await g.settled();
    upstreams[Number(w.slice(1))].healthy = false;
    await g.checkHealth();
    const health = await json(await fetch(`${g.url}/health`));
    expect(health.workers.find((x: { id: string }) => x.id === w).healthy).toBe(false);
    const next = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', h);
    expect(next.headers.get("x-kvctl-worker")).not.toBe(w);
    upstreams[Number(w.slice(1))].healthy = true;
    await g.checkHealth();
    expect(
      (await json(await fetch(`${g.url}/health`))).workers.every(
        (x: { healthy: boolean }) => x.healthy,
      ),
    ).toBe(true);
  });
});

describe("gateway: sessions on a fake clock", () => {
  it("reports a session idle once after idleAfterSeconds, and again only after a new turn", async () => {
    let t = 1_000_000;
    const seen: string[] = [];
    const policy: GatewayPolicy = {
      name: "record",
      observe: (o) => (
        seen.push(o.type === "SessionIdle" ? `idle ${o.sessionId} ${o.idleMs}` : o.type), []
      ),
    };
    const g = await createGateway({
      config: {
        listen: { host: "127.0.0.1", port: 0 },
        workers: upstreams.map((u, i) => ({ id: `w${i}`, url: u.url })),
        health: { intervalMs: 60_000, timeoutMs: 1000, failures: 1 },
        sessions: { idleAfterSeconds: 30 },
      },
      policy,
      clock: { now: () => t },
      log: (l) => logs.push(l),
    });
    gateways.push(g);
    await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', { "x-session-id": "idle-s" });
    await g.settled();
    expect(seen).toEqual(["WorkerJoined", "WorkerJoined", "TurnStarted", "TurnFinished"]);
    t += 29_999;
    await g.sweepIdle();
    expect(seen.filter((x) => x.startsWith("idle"))).toEqual([]);
    t += 1;
    await g.sweepIdle();
    await g.sweepIdle();
    expect(seen.filter((x) => x.startsWith("idle"))).toEqual(["idle idle-s 30000"]);
    // A new turn within the affinity TTL goes back to the same worker and re-arms the idle report.
    const again = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', {
      "x-session-id": "idle-s",
    });
    expect(again.headers.get("x-kvctl-worker")).toBe((await g.sessions.get("idle-s"))?.worker);
    await g.settled();
    t += 31_000;
    await g.sweepIdle();
    expect(seen.filter((x) => x.startsWith("idle"))).toEqual([
      "idle idle-s 30000",
      "idle idle-s 31000",
    ]);
  });
});

describe("gateway: NATS down", () => {
  it("keeps serving; commands queue up to the bound, the rest are dropped and counted; the queue drains on reconnect", async () => {
    const policy: GatewayPolicy = {
      name: "inspect-each-turn",
      observe: (o) =>
        o.type === "TurnFinished"
          ? [
              {
                worker: o.worker,
                reason: "test",
                sessionId: o.sessionId,
                command: { type: "Inspect", session_id: "s" },
              },
            ]
          : [],
    };
    const g = await gw(
      { nats: { url: nats.url, opTimeoutMs: 300 }, limits: { commandQueue: 2 } },
      policy,
    );
    await nats.stop();
    for (let i = 0; i < 3; i++) {
      const r = await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', {
        "x-session-id": "while-down",
      });
      expect(r.status).toBe(200);
    }
    await g.settled();
    expect(await metric(g, "kvctl_gateway_commands_dropped_total")).toEqual([
      'kvctl_gateway_commands_dropped_total{reason="queue_full"} 1',
    ]);
    expect(await metric(g, "kvctl_gateway_commands_queued")).toEqual([
      "kvctl_gateway_commands_queued 2",
    ]);
    expect(await metric(g, "kvctl_gateway_nats_connected")).toEqual([
      "kvctl_gateway_nats_connected 0",
    ]);
    const rec = await g.sessions.get("while-down");
    expect(rec?.turnCount).toBe(3);
    await nats.restart();
    const deadline = Date.now() + 20_000;
    while (
      Date.now() < deadline &&
      (await metric(g, "kvctl_gateway_commands_sent_total")).length === 0
    )
      await new Promise((r) => setTimeout(r, 50));
    expect(await metric(g, "kvctl_gateway_commands_sent_total")).toEqual([
      'kvctl_gateway_commands_sent_total{type="Inspect"} 2',
    ]);
    expect(await metric(g, "kvctl_gateway_commands_queued")).toEqual([
      "kvctl_gateway_commands_queued 0",
    ]);
  }, 60_000);
});

describe("gateway: command timeout", () => {
  it("a worker slower than commandTimeoutMs gets the command again under the same id; within it, once", async () => {
    const nc = await connect({ servers: nats.url });
    const seen: string[] = [];
    const sub = nc.subscribe("kv-control-w0");
    void (async () => {
      for await (const m of sub) {
        const env = JSON.parse(m.string()) as { id: string; command: { type: CommandType } };
        seen.push(env.id);
        // A busy scheduler: the ack comes a while after the command.
        setTimeout(
          () => m.respond(encodeAck(blankAck("w0", env.id, env.command.type, "applied"))),
          300,
        );
      }
    })();
    const policy: GatewayPolicy = {
      name: "inspect-each-turn",
      observe: (o) =>
        o.type === "TurnFinished"
          ? [
              {
                worker: "w0",
                reason: "test",
                sessionId: o.sessionId,
                command: { type: "Inspect", session_id: "s" },
              },
            ]
          : [],
    };
    try {
      // 5 s: one send, acked. 100 ms with one resend: two sends under the same id, both answered
      // after the gateway gave up (counted failed; the worker dedupes the resend).
      for (const [timeoutMs, sends, outcome] of [
        [5000, 1, "acked"],
        [100, 2, "failed"],
      ] as const) {
        seen.length = 0;
        // No Inspect rounds: every message on the worker's subject here is the policy's command.
        const g = await gw(
          {
            nats: {
              url: nats.url,
              opTimeoutMs: 2000,
              commandTimeoutMs: timeoutMs,
              commandRetries: 1,
            },
            sessions: { idleAfterSeconds: 0, inspectMs: 0 },
          },
          policy,
        );
        expect(
          (
            await post(`${g.url}/v1/chat/completions`, '{"messages":[]}', {
              "x-session-id": `slow-${timeoutMs}`,
            })
          ).status,
        ).toBe(200);
        await g.settled();
        expect(seen.length).toBe(sends);
        expect(new Set(seen).size).toBe(1);
        expect(await metric(g, "kvctl_gateway_commands_acked_total")).toEqual(
          outcome === "acked"
            ? ['kvctl_gateway_commands_acked_total{type="Inspect",status="applied"} 1']
            : [],
        );
        expect((await metric(g, "kvctl_gateway_commands_failed_total")).length).toBe(
          outcome === "failed" ? 1 : 0,
        );
        await g.close();
        gateways.splice(gateways.indexOf(g), 1);
      }
    } finally {
      sub.unsubscribe();
      await nc.close();
    }
  }, 60_000);
});

describe("gateway: KV-event gaps", () => {
  it("marks a worker stale from a gap until its replay arrives", async () => {
    const pub = new Publisher({ linger: 0 });
    const port = await freePort();
    const rport = await freePort();
    await pub.bind(`tcp://127.0.0.1:${port}`);
    const router = new Router({ linger: 0 });
    await router.bind(`tcp://127.0.0.1:${rport}`);
    try {
      const g = await gw({
        workers: [
          {
            id: "w0",
            url: upstreams[0].url,
            events: `tcp://127.0.0.1:${port}`,
            replay: `tcp://127.0.0.1:${rport}`,
          },
          { id: "w1", url: upstreams[1].url },
        ],
      });
      const batch = (h: bigint) =>
        encodeBatch({
          ts: 0,
          events: [blockStored({ blockHashes: [h], tokenIds: [1, 2, 3, 4], blockSize: 4 })],
          dpRank: null,
        });
      // ZMQ slow joiner: publish seq 0 until the gateway's index has it.
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && !g.index.lookup(1n)) {
        await pub.send([Buffer.alloc(0), encodeSeq(0n), batch(1n)]);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(g.index.lookup(1n)).toBeDefined();
      await pub.send([Buffer.alloc(0), encodeSeq(2n), batch(3n)]);
      const [id, , from] = await router.receive();
      expect(from.readBigInt64BE()).toBe(1n);
      expect(await metric(g, "kvctl_gateway_worker_index_stale")).toContain(
        'kvctl_gateway_worker_index_stale{worker="w0"} 1',
      );
      expect((await json(await fetch(`${g.url}/health`))).workers[0].stale).toBe(true);
      await router.send([id, Buffer.alloc(0), Buffer.alloc(0), encodeSeq(1n), batch(2n)]);
      await router.send([
        id,
        Buffer.alloc(0),
        Buffer.alloc(0),
        encodeSeq(END_SEQ),
        Buffer.alloc(0),
      ]);
      while (Date.now() < deadline && !g.index.lookup(3n))
        await new Promise((r) => setTimeout(r, 20));
      expect(g.index.lookup(2n)?.residency.get("w0")).toEqual(["GPU"]);
      expect(g.index.lookup(3n)?.residency.get("w0")).toEqual(["GPU"]);
      expect(await metric(g, "kvctl_gateway_worker_index_stale")).toContain(
        'kvctl_gateway_worker_index_stale{worker="w0"} 0',
      );
      expect(await metric(g, "kvctl_gateway_kv_event_gaps_total")).toEqual([
        'kvctl_gateway_kv_event_gaps_total{worker="w0"} 1',
      ]);
    } finally {
      pub.close();
      router.close();
    }
  }, 30_000);
});

describe("kvctl gateway (CLI)", () => {
  const cli = (args: string[]) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/bin.ts", "gateway", ...args],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    return { child, err: () => err };
  };

  it("serves from a YAML config file and stops cleanly on SIGTERM", async () => {
    const port = await freePort();
    const file = join(jsDir, "gw.yaml");
    writeFileSync(
      file,
      `workers:\n  - id: w0\n    url: ${upstreams[0].url}\nrouting:\n  cacheThreshold: 0.5\n`,
    );
    const { child, err } = cli(["--config", file, "--listen", `127.0.0.1:${port}`, "--no-nats"]);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && !err().includes("listening on"))
      await new Promise((r) => setTimeout(r, 50));
    expect(err()).toContain(
      `gateway: listening on http://127.0.0.1:${port} for w0=${upstreams[0].url}`,
    );
    expect((await json(await fetch(`http://127.0.0.1:${port}/health`))).status).toBe("ok");
    child.kill("SIGTERM");
    const [code] = await once(child, "exit");
    expect(code).toBe(0);
  }, 40_000);

  it("refuses a worker whose hashes it cannot reproduce, and a bad config, with exit 2", async () => {
    upstreams[1].info = { enable_lora: true };
    try {
      const a = cli(["--worker", `w1=${upstreams[1].url}`, "--no-nats"]);
      const [code] = await once(a.child, "exit");
      expect(code).toBe(2);
      expect(a.err()).toMatch(
        /worker w1 \(http:\/\/127\.0\.0\.1:\d+\): LoRA is enabled.*refusing it/,
      );
    } finally {
      upstreams[1].info = {};
    }
    const b = cli(["--worker", "w1=ftp://nowhere", "--no-nats"]);
    const [code] = await once(b.child, "exit");
    expect(code).toBe(2);
    expect(b.err()).toContain("workers.0.url: must be http(s)://host:port");
  }, 40_000);
});
