// The gateway's operational behaviour in-process, over real HTTP: bounded admission (429 when the
// queue is full, 503 past the wait deadline, both with Retry-After and counted per tenant),
// membership (a worker down at start joins when it comes up, the admin API adds, drains and removes
// workers, the config file's worker list is applied as it changes), the readiness probes, and
// telemetry (latency histograms, W3C traceparent to the worker, OTLP/HTTP span export to a real
// HTTP collector). The workers are HTTP stand-ins (test/helpers/http-stand-in.ts says why).
import { once } from "node:events";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import {
  applyWorkerList,
  createGateway,
  watchWorkerList,
  type Gateway,
  type GatewayConfigInput,
} from "../src/gateway/index.js";
import { freePort } from "../src/util/net.js";
import { type HttpStandIn, startHttpStandIn } from "./helpers/http-stand-in.js";
import { until } from "./helpers/poll.js";

const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close().catch(() => undefined);
});
const dir = mkdtempSync(join(tmpdir(), "kvctl-gw-ops-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function worker(port = 0): Promise<HttpStandIn> {
  const w = await startHttpStandIn(port);
  open.push(w);
  return w;
}

async function gateway(
  config: Partial<GatewayConfigInput> & Pick<GatewayConfigInput, "workers">,
  log?: (l: string) => void,
): Promise<Gateway> {
  const g = await createGateway({
    config: {
      listen: { port: 0 },
      health: { intervalMs: 100, timeoutMs: 1000, failures: 1 },
      ...config,
    },
    log: log ?? (() => undefined),
  });
  open.push(g);
  return g;
}

const chat = (
  g: Gateway,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
) =>
  fetch(`${g.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], ...extra }),
  });

async function metric(g: Gateway, name: string): Promise<string[]> {
  const text = await (await fetch(`${g.url}/metrics`)).text();
  return text.split("\n").filter((l) => l.startsWith(name));
}

/** Sends `n` chat requests one after another on one raw connection; ms from each one's last byte to its answer's first. */
async function timedRefusals(g: Gateway, n: number): Promise<number[]> {
  const s = connect(Number(new URL(g.url).port), "127.0.0.1");
  await once(s, "connect");
  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
  const req = `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
  const took: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      s.write(req);
      const [chunk] = (await once(s, "data")) as [Buffer];
      took.push(performance.now() - t0);
      expect(chunk.toString()).toMatch(/^HTTP\/1\.1 429 /);
    }
  } finally {
    s.destroy();
  }
  return took;
}

type ErrorAnswer = { error: { type: string; message: string } };

const admin = (g: Gateway, method: string, path: string, body?: unknown) =>
  fetch(`${g.url}/kvctl/v1/admin/workers${path}`, {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });

describe("bounded admission", () => {
  it("answers 429 at once when the queue is at its bound, and 503 to a request that waited past its deadline", async () => {
    const w = await worker();
    let release!: () => void;
    w.hold = new Promise<void>((r) => (release = r));
    const g = await gateway({
      workers: [{ id: "w0", url: w.url }],
      admission: { maxRequestsPerWorker: 1, maxQueuedPerWorker: 2, queueTimeoutMs: 1500 },
    });
    const running = chat(g);
    await until("the first request to reach the worker", () => w.chats.length === 1);
    const t0 = performance.now();
    const waiting = [chat(g), chat(g)];
    await until("two requests waiting", async () =>
      (await metric(g, "kvctl_gateway_admission_waiting_requests")).includes(
        'kvctl_gateway_admission_waiting_requests{worker="w0"} 2',
      ),
    );
    // The queue is full: each further request is refused without waiting, timed on one kept-alive
    // connection from the request's last byte to the answer's first.
    const r = await chat(g);
    expect(r.status).toBe(429);
    expect(r.headers.get("retry-after")).toBe("2");
    expect(((await r.json()) as ErrorAnswer).error.type).toBe("rate_limited");
    const took = await timedRefusals(g, 5);
    // The fastest of five: the gateway's own answer time, not the busy machine's scheduling.
    expect(Math.min(...took)).toBeLessThan(10);
    // The two waiting ones run out of time: 503, not before their deadline.
    for (const p of waiting) {
      const r = await p;
      expect(r.status).toBe(503);
      expect(r.headers.get("retry-after")).toBe("2");
      expect(((await r.json()) as ErrorAnswer).error.message).toContain("queueTimeoutMs");
    }
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1500);
    release();
    expect((await running).status).toBe(200);
    expect(w.chats.length).toBe(1);
    const refused = await metric(g, "kvctl_gateway_admission_refused_total");
    expect(refused).toContain(
      'kvctl_gateway_admission_refused_total{worker="w0",reason="queue_full",tenant="default"} 6',
    );
    expect(refused).toContain(
      'kvctl_gateway_admission_refused_total{worker="w0",reason="deadline",tenant="default"} 2',
    );
    // The queue is free again: the next request runs.
    expect((await chat(g)).status).toBe(200);
  }, 30_000);

  it("refuses a queue bound without a queue, naming the field", async () => {
    await expect(
      createGateway({
        config: {
          workers: [{ id: "w0", url: "http://127.0.0.1:1" }],
          admission: { maxQueuedPerWorker: 4 },
        },
      }),
    ).rejects.toThrow(/admission\.maxQueuedPerWorker: a queue bound needs a queue/);
  });
});

describe("membership", () => {
  it("starts with a worker down; it joins when it comes up; the admin API adds, drains and removes workers, and a removed worker's sessions move", async () => {
    const w0 = await worker();
    const downPort = await freePort();
    const logs: string[] = [];
    const g = await gateway(
      {
        workers: [
          { id: "w0", url: w0.url },
          { id: "w1", url: `http://127.0.0.1:${downPort}` },
        ],
      },
      (l) => logs.push(l),
    );
    expect(logs.join("\n")).toMatch(/worker w1 .*\/server_info failed.*it joins when it answers/);
    expect((await fetch(`${g.url}/readyz`)).status).toBe(200);
    const view = async () =>
      (
        (await (await admin(g, "GET", "")).json()) as {
          workers: { id: string; healthy: boolean; drained: boolean }[];
        }
      ).workers;
    expect((await view()).find((w) => w.id === "w1")?.healthy).toBe(false);

    // w1 comes up: it joins and, with w0 drained, takes the traffic.
    const w1 = await worker(downPort);
    await until(
      "w1 to join",
      async () => (await view()).find((w) => w.id === "w1")?.healthy === true,
    );
    expect((await admin(g, "POST", "/w0/drain")).status).toBe(200);
    const r1 = await chat(g);
    expect(r1.headers.get("x-kvctl-worker")).toBe("w1");
    expect(w1.chats.length).toBe(1);

    // w2 added through the admin API takes traffic once w1 is drained too.
    const w2 = await worker();
    const added = await admin(g, "POST", "", { id: "w2", url: w2.url });
    expect(added.status).toBe(201);
    expect((await admin(g, "POST", "", { id: "w2", url: w2.url })).status).toBe(409);
    expect((await admin(g, "POST", "", { id: "w3", url: "ftp://x" })).status).toBe(400);
    expect((await admin(g, "POST", "/w1/drain")).status).toBe(200);
    const session = { "x-session-id": "s-move" };
    const r2 = await chat(g, {}, session);
    expect(r2.headers.get("x-kvctl-worker")).toBe("w2");
    await g.settled();

    // w2 removed: the session moves to w1 (undrained) and w2 gets nothing more.
    expect((await admin(g, "POST", "/w1/undrain")).status).toBe(200);
    expect((await admin(g, "DELETE", "/w2")).status).toBe(200);
    expect((await admin(g, "DELETE", "/w2")).status).toBe(404);
    const seen = w2.chats.length;
    for (let i = 0; i < 3; i++) {
      const r = await chat(g, {}, session);
      expect(r.status).toBe(200);
      expect(r.headers.get("x-kvctl-worker")).toBe("w1");
    }
    expect(w2.chats.length).toBe(seen);
    expect((await view()).map((w) => w.id)).toEqual(["w0", "w1"]);
    const changes = await metric(g, "kvctl_gateway_membership_changes_total");
    for (const c of [
      'change="joined"} 1',
      'change="added"} 1',
      'change="drained"} 2',
      'change="undrained"} 1',
      'change="removed"} 1',
    ])
      expect(changes.join("\n")).toContain(c);
  }, 60_000);

  it("applies the config file's worker list as it changes, and keeps serving on a bad one", async () => {
    const w0 = await worker();
    const w1 = await worker();
    const file = join(dir, "gw.yaml");
    writeFileSync(file, `workers:\n  - id: w0\n    url: ${w0.url}\n`);
    const logs: string[] = [];
    const log = (l: string) => logs.push(l);
    const g = await gateway({ workers: [{ id: "w0", url: w0.url }] }, log);
    writeFileSync(file, `workers:\n  - id: w1\n    url: ${w1.url}\n`);
    expect(await applyWorkerList(file, g.workers, 1000, log)).toEqual(["-w0", "+w1"]);
    expect((await chat(g)).headers.get("x-kvctl-worker")).toBe("w1");
    writeFileSync(file, `workers:\n  - id: w1\n    url: ftp://nowhere\n`);
    expect(await applyWorkerList(file, g.workers, 1000, log)).toEqual([]);
    expect(logs.join("\n")).toMatch(
      /config reload refused, nothing changed: .*workers\.0\.url: must be http/s,
    );
    expect(g.workers.workers.map((w) => w.id)).toEqual(["w1"]);
    expect((await chat(g)).status).toBe(200);
    // Watched: a save of the file is applied without a call.
    const watching = watchWorkerList(file, g.workers, 1000, log);
    open.push({ close: async () => watching.close() });
    writeFileSync(
      file,
      `workers:\n  - id: w0\n    url: ${w0.url}\n  - id: w1\n    url: ${w1.url}\n`,
    );
    await until("the saved worker list to be applied", () => g.workers.workers.length === 2);
    await watching.settled();
    expect(g.workers.workers.map((w) => w.id)).toEqual(["w1", "w0"]);
  }, 30_000);
});

describe("listener cap", () => {
  it("closes connections beyond listener.maxConnections at once, counted, and cuts a client slow with its headers", async () => {
    const w0 = await worker();
    const g = await gateway({
      workers: [{ id: "w0", url: w0.url }],
      listener: { maxConnections: 5, headersTimeoutMs: 500, bodyTimeoutMs: 5000 },
    });
    const port = Number(new URL(g.url).port);
    const sockets = Array.from({ length: 8 }, () => connect(port, "127.0.0.1"));
    let closedCount = 0;
    const closed = sockets.map((s) =>
      new Promise<void>((r) => s.on("close", () => r())).then(() => closedCount++),
    );
    for (const s of sockets) s.on("error", () => undefined).resume();
    // Three over the cap are closed by the gateway at once (the scrape would be a ninth: it waits);
    // the five it kept send half their headers and are cut at the headers deadline.
    await until("three refusals", () => closedCount >= 3);
    for (const s of sockets)
      if (!s.destroyed) s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n");
    await Promise.all(closed);
    expect(await metric(g, "kvctl_gateway_connections_refused_total")).toEqual([
      "kvctl_gateway_connections_refused_total 3",
    ]);
    expect((await metric(g, "kvctl_gateway_listener_cuts_total")).join()).toContain(
      'reason="request_timeout"} 5',
    );
  }, 30_000);
});

describe("the body deadline", () => {
  it("cuts a body trickled at 1 byte/s at listener.bodyTimeoutMs, within a small bound, and on a kept-alive connection counts from each request", async () => {
    const BODY_MS = 3000;
    // Within this of the deadline (node's own sweep, every headersTimeoutMs / 4 here, was up to that late).
    const BOUND_MS = 300;
    const w0 = await worker();
    const lines: { msg: string; path: string; status: number; duration_ms: number }[] = [];
    const g = await gateway(
      {
        workers: [{ id: "w0", url: w0.url }],
        listener: { headersTimeoutMs: BODY_MS, bodyTimeoutMs: BODY_MS },
        logging: { format: "json" },
      },
      (l) => lines.push(JSON.parse(l)),
    );
    const port = Number(new URL(g.url).port);
    const head =
      "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const whole = `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    const sockets = Array.from({ length: 20 }, () => connect(port, "127.0.0.1"));
    const closed = sockets.map((s) => new Promise<void>((r) => s.on("close", () => r())));
    let replies = "";
    sockets.forEach((s, i) => {
      s.on("error", () => undefined);
      s.on("data", (d) => {
        if (i === 0) replies += d.toString();
      });
      // The first connection is kept alive: a whole request, its answer, then a trickled one.
      s.once("connect", () => s.write(i === 0 ? whole : head));
    });
    await until(
      "the whole request's answer",
      () => replies.includes("[DONE]") || replies.includes('"choices"'),
    );
    // Its trickled request starts with the first tick, a second into the connection's life: its
    // deadline counts from there (a deadline from the connection's start would cut it early).
    let ticks = 0;
    const trickle = setInterval(() => {
      for (const [i, s] of sockets.entries())
        if (s.writable) s.write(i === 0 && ticks === 0 ? head : " ");
      ticks++;
    }, 1000);
    try {
      await Promise.all(closed);
    } finally {
      clearInterval(trickle);
    }
    await until(
      "a request line for every request",
      () => lines.filter((l) => l.msg === "request").length === 21,
    );
    const cut = lines
      .filter((l) => l.msg === "request" && l.status === 0)
      .map((l) => l.duration_ms);
    expect(cut).toHaveLength(20);
    for (const ms of cut) {
      expect(ms).toBeGreaterThanOrEqual(BODY_MS);
      expect(ms).toBeLessThan(BODY_MS + BOUND_MS);
    }
    expect((await metric(g, "kvctl_gateway_listener_cuts_total")).join()).toContain(
      'reason="request_timeout"} 20',
    );
  }, 30_000);
});

describe("probes", () => {
  it("/livez answers while the process serves; /readyz only while a worker takes traffic", async () => {
    const w0 = await worker();
    const g = await gateway({ workers: [{ id: "w0", url: w0.url }] });
    expect((await fetch(`${g.url}/readyz`)).status).toBe(200);
    await admin(g, "POST", "/w0/drain");
    const r = await fetch(`${g.url}/readyz`);
    expect(r.status).toBe(503);
    expect(await r.json()).toEqual({ status: "no_workers" });
    expect((await fetch(`${g.url}/livez`)).status).toBe(200);
  });
});

describe("telemetry", () => {
  it("logs levelled JSON lines, one per request with its request id, when logging.format is json", async () => {
    const w = await worker();
    const lines: Record<string, unknown>[] = [];
    const g = await gateway(
      {
        workers: [
          { id: "w0", url: w.url },
          { id: "w1", url: `http://127.0.0.1:${await freePort()}` },
        ],
        logging: { format: "json" },
      },
      (l) => lines.push(JSON.parse(l)),
    );
    const asked = [
      await chat(g, {}, { "x-session-id": "s-log" }),
      // Malformed JSON on the inference door, an unknown route and a hint on the fastify door.
      await fetch(`${g.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{",
      }),
      await fetch(`${g.url}/nope`),
      await fetch(`${g.url}/kvctl/v1/sessions/s-nobody/events`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ event: "idle" }),
      }),
    ];
    expect(asked.map((r) => r.status)).toEqual([200, 400, 404, 404]);
    for (const r of asked) await r.arrayBuffer();
    const ids = asked.map((r) => r.headers.get("x-request-id"));
    for (const id of ids) expect(id).toMatch(/^gw-/);
    expect(new Set(ids).size).toBe(4);
    await g.settled();
    const requestLines = () => lines.filter((l) => l.msg === "request");
    await until("a request line for each request", () => requestLines().length === 4);
    const byId = new Map(requestLines().map((l) => [l.request_id, l]));
    expect(byId.get(ids[0])).toMatchObject({
      level: 30,
      service: "kvctl-gateway",
      method: "POST",
      path: "/v1/chat/completions",
      route: "chat",
      worker: "w0",
      tenant: "default",
      session: "s-log",
      status: 200,
      error: null,
    });
    expect(byId.get(ids[1])).toMatchObject({
      level: 30,
      path: "/v1/chat/completions",
      status: 400,
      worker: null,
    });
    expect(byId.get(ids[2])).toMatchObject({ level: 30, path: "/nope", route: null, status: 404 });
    expect(byId.get(ids[3])).toMatchObject({
      level: 30,
      path: "/kvctl/v1/sessions/s-nobody/events",
      status: 404,
    });
    // A line written while serving a request carries its request id.
    expect(lines.find((l) => String(l.msg).includes("unknown session"))).toMatchObject({
      level: 30,
      request_id: ids[3],
    });
    // Each line names its level; the worker that did not answer at start is a warning.
    for (const l of lines) expect([20, 30, 40, 50]).toContain(l.level);
    expect(lines.find((l) => String(l.msg).includes("worker w1"))).toMatchObject({ level: 40 });
  });

  it("loads the OpenTelemetry SDK only when an OTLP endpoint is configured", () => {
    // A child process with a resolve hook that notes each @opentelemetry/* import; the second
    // run (endpoint set) shows the hook sees the SDK when it is loaded.
    const seen = (url: string): string[] => {
      const file = join(dir, `modules-${url ? "on" : "off"}.txt`);
      writeFileSync(file, "");
      const script = `import { createGateway } from "./src/gateway/index.ts";
        const g = await createGateway({ config: { listen: { port: 0 }, workers: [{ id: "w0", url: "http://127.0.0.1:1" }], telemetry: { otlpTracesUrl: process.argv[1] || undefined } }, log: () => {} });
        await g.close();
        console.log("closed");`;
      const r = spawnSync(
        process.execPath,
        [
          "--import",
          "tsx",
          "--import",
          "./test/fixtures/module-watch/register.mjs",
          "--input-type=module",
          "-e",
          script,
          url,
        ],
        { env: { ...process.env, MODULE_WATCH_FILE: file }, encoding: "utf8", timeout: 60_000 },
      );
      expect(r.stdout, r.stderr).toContain("closed");
      return readFileSync(file, "utf8").split("\n").filter(Boolean);
    };
    expect(seen("").filter((m) => m !== "@opentelemetry/api")).toEqual([]);
    expect(seen("http://127.0.0.1:9/v1/traces")).toEqual(
      expect.arrayContaining([
        "@opentelemetry/sdk-trace-base",
        "@opentelemetry/exporter-trace-otlp-http",
      ]),
    );
  }, 120_000);

  it("observes TTFT, inter-token and end-to-end latency, and traces each call under the client's traceparent", async () => {
    // A real OTLP/HTTP receiver: it decodes what the OpenTelemetry exporter posts (OTLP JSON).
    type OtlpSpan = {
      traceId: string;
      spanId: string;
      parentSpanId?: string;
      name: string;
      kind: number;
      attributes: { key: string; value: { stringValue?: string; intValue?: string | number } }[];
    };
    const spans: OtlpSpan[] = [];
    const services: string[] = [];
    const collector = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      expect(req.url).toBe("/v1/traces");
      expect(req.headers["content-type"]).toContain("application/json");
      const doc = JSON.parse(Buffer.concat(chunks).toString());
      for (const rs of doc.resourceSpans) {
        services.push(
          rs.resource.attributes.find((a: { key: string }) => a.key === "service.name")?.value
            .stringValue,
        );
        for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
    collector.listen(0, "127.0.0.1");
    await once(collector, "listening");
    open.push({ close: async () => collector.close() });
    const w = await worker();
    w.events = 5;
    w.gapMs = 5;
    const g = await gateway({
      workers: [{ id: "w0", url: w.url }],
      telemetry: {
        otlpTracesUrl: `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`,
      },
    });
    const incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for (let i = 0; i < 3; i++) {
      const r = await chat(
        g,
        { stream: true },
        { traceparent: incoming, tracestate: "vendor=abc" },
      );
      expect(await r.text()).toContain("[DONE]");
    }
    // A request with no trace context starts a trace of its own.
    expect((await chat(g)).status).toBe(200);
    const sent = w.chats.map((h) => h.traceparent as string);
    for (const tp of sent.slice(0, 3)) {
      expect(tp).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
      expect(tp).not.toContain("b7ad6b7169203331");
    }
    expect(w.chats[0].tracestate).toBe("vendor=abc");
    expect(sent[3]).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(sent[3]).not.toContain("0af7651916cd43dd8448eb211c80319c");
    const count = async (name: string) =>
      Number((await metric(g, name)).find((l) => l.includes('worker="w0"'))?.split(" ")[1]);
    expect(await count("kvctl_gateway_time_to_first_token_seconds_count")).toBe(3);
    // 5 content chunks and the closing one per stream, as the stand-in writes them; the gateway
    // may read two together, so at least one gap per stream and at most the chunks less one.
    const gaps = await count("kvctl_gateway_inter_token_latency_seconds_count");
    expect(gaps).toBeGreaterThanOrEqual(3);
    expect(gaps).toBeLessThanOrEqual(3 * 5);
    expect(await count("kvctl_gateway_e2e_latency_seconds_count")).toBe(4);
    expect((await metric(g, "kvctl_gateway_e2e_latency_seconds_count")).join()).toContain(
      'route="chat",worker="w0",tenant="default"',
    );
    // close() flushes the batch to the receiver.
    await g.close();
    expect(spans.length).toBe(4);
    expect(new Set(services)).toEqual(new Set(["kvctl-gateway"]));
    // Each span the worker was told of arrived, under the client's span (or as a root), as a client span.
    for (const [i, tp] of sent.entries()) {
      const [, traceId, spanId] = tp.split("-");
      const span = spans.find((s) => s.spanId === spanId);
      expect(span).toMatchObject({ traceId, name: "POST /v1/chat/completions", kind: 3 });
      if (i < 3) expect(span?.parentSpanId).toBe("b7ad6b7169203331");
      else expect(span?.parentSpanId ?? "").toBe("");
      const attr = (k: string) => span?.attributes.find((a) => a.key === k)?.value;
      expect(attr("kvctl.worker")?.stringValue).toBe("w0");
      expect(Number(attr("http.response.status_code")?.intValue)).toBe(200);
    }
  }, 30_000);
});
