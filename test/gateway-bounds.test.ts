// `kvctl gateway` as a process, at its doors: SIGTERM during 20 streamed answers drains (all 20 end
// whole, a request after it gets 503 with Retry-After, their session records reach NATS, exit 0);
// 1,000 connections trickling their bodies at 1 byte/s are all cut at the body deadline and the
// gateway's file descriptors come back to their idle count; one 1 GiB KV-event message from a real
// ZMQ publisher is refused by ZMQ unread, leaving `kvctl watch`'s and the gateway's RSS where they
// were. The worker is an HTTP stand-in (test/helpers/http-stand-in.ts says why); ZMQ, the CLI and
// the sockets are real.
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect as natsConnect } from "@nats-io/transport-node";
import { sessionKey } from "../src/gateway/sessions/session-store.js";
import { freePort } from "../src/util/net.js";
import { startNatsServer } from "./helpers/nats-server.js";
import { type HttpStandIn, startHttpStandIn } from "./helpers/http-stand-in.js";
import { repoRoot } from "./helpers/python.js";
import { until } from "./helpers/poll.js";

const dir = mkdtempSync(join(tmpdir(), "kvctl-gw-bounds-"));
const children: ChildProcessWithoutNullStreams[] = [];
const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
  for (const c of closers.splice(0)) await c();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function tsx(args: string[]): { child: ChildProcessWithoutNullStreams; err: () => string } {
  const child = spawn(process.execPath, ["--import", "tsx", ...args], { cwd: repoRoot });
  children.push(child);
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  return { child, err: () => err };
}

/** A gateway process from a YAML config; resolves once it listens. */
async function gatewayProcess(
  yaml: string,
  flags: string[] = ["--no-nats"],
): Promise<{ child: ChildProcessWithoutNullStreams; err: () => string; url: string }> {
  const port = await freePort();
  const file = join(dir, `gw-${port}.yaml`);
  writeFileSync(file, yaml);
  const g = tsx([
    "src/cli/bin.ts",
    "gateway",
    "--config",
    file,
    "--listen",
    `127.0.0.1:${port}`,
    ...flags,
  ]);
  await until(
    "the gateway to listen",
    () => g.err().includes("listening on") || g.child.exitCode !== null,
  );
  if (g.child.exitCode !== null) throw new Error(`gateway exited: ${g.err()}`);
  return { ...g, url: `http://127.0.0.1:${port}` };
}

async function worker(): Promise<HttpStandIn> {
  const w = await startHttpStandIn();
  closers.push(() => w.close());
  return w;
}

const chat = (url: string, stream: boolean, session?: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(session ? { "x-session-id": session } : {}),
    },
    body: JSON.stringify({ model: "m", stream, messages: [{ role: "user", content: "hi" }] }),
  });

const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;
const rssMb = (pid: number) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? Number.NaN) /
  1024;

async function metricValue(url: string, line: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const l = text.split("\n").find((x) => x.startsWith(line));
  return l ? Number(l.slice(line.length).trim()) : 0;
}

describe("kvctl gateway drains on SIGTERM", () => {
  it("finishes 20 streams under way, answers a request after it 503 with Retry-After, flushes their session records and exits 0", async () => {
    const nats = await startNatsServer(["-js", "-sd", join(dir, "js")]);
    closers.push(() => nats.stop());
    const w = await worker();
    w.events = 30;
    w.gapMs = 60;
    const g = await gatewayProcess(
      `workers:\n  - id: w0\n    url: ${w.url}\ndrain:\n  graceMs: 60000\n  retryAfterSeconds: 7\n`,
      ["--nats-url", nats.url],
    );
    const started: boolean[] = Array(20).fill(false);
    const streams = started.map(async (_, i) => {
      const r = await chat(g.url, true, `s-${i}`);
      const reader = (r.body as ReadableStream<Uint8Array>).getReader();
      let text = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString();
        started[i] = true;
      }
      return text;
    });
    await until("all 20 streams to start", () => started.every(Boolean));
    g.child.kill("SIGTERM");
    await until(
      "readiness to go false",
      async () => (await fetch(`${g.url}/readyz`)).status === 503,
    );
    expect((await fetch(`${g.url}/livez`)).status).toBe(200);
    const late = await chat(g.url, false);
    expect(late.status).toBe(503);
    expect(late.headers.get("retry-after")).toBe("7");
    const texts = await Promise.all(streams);
    for (const t of texts) {
      expect(t.match(/"content":"t\d+"/g)?.length).toBe(30);
      expect(t).toContain("data: [DONE]");
    }
    const [code] = await new Promise<[number | null]>((r) => g.child.once("exit", (c) => r([c])));
    expect(code).toBe(0);
    expect(g.err()).toContain("gateway: drained; commands and session records flushed");
    // Every stream's turn is in its session record, written before the process went.
    const nc = await natsConnect({ servers: nats.url });
    closers.push(() => nc.close());
    const kv = await new Kvm(nc).open("kvctl_sessions");
    for (let i = 0; i < 20; i++) {
      const rec = (await kv.get(sessionKey(`s-${i}`)))?.json() as
        | { turns: { status: number }[] }
        | undefined;
      expect(rec?.turns.map((t) => t.status)).toEqual([200]);
    }
  }, 120_000);
});

/**
 * How late after its deadline each of a thousand trickled requests may be cut, in the gateway's own
 * view. The timer is precise (gateway-ops.test.ts bounds it for 20 connections); what is left is a
 * thousand cuts' work on a machine shared by several test runs.
 */
const CUT_BOUND_MS = 3000;

describe("kvctl gateway's listener bounds", () => {
  it("cuts 1,000 connections trickling their bodies at 1 byte/s at the body deadline; its file descriptors come back", async () => {
    const w = await worker();
    const BODY_MS = 3000;
    // The JSON log's request lines say, per request, how long it was open in the gateway.
    const g = await gatewayProcess(
      `workers:\n  - id: w0\n    url: ${w.url}\nlistener:\n  headersTimeoutMs: 1000\n  bodyTimeoutMs: ${BODY_MS}\nlogging:\n  format: json\n`,
    );
    const pid = g.child.pid as number;
    await until(
      "the gateway to be ready",
      async () => (await fetch(`${g.url}/readyz`)).status === 200,
    );
    // Idle: the scrape's own connection closed again.
    const idleFds = fds(pid);
    const N = 1000;
    const closedAfter: number[] = [];
    let answered408 = 0;
    const sockets: Socket[] = [];
    let peakFds = 0;
    for (let i = 0; i < N; i++) {
      // From before the connection exists: the gateway cannot have started its deadline earlier.
      const t0 = performance.now();
      const s = connect(Number(new URL(g.url).port), "127.0.0.1");
      sockets.push(s);
      s.on("connect", () =>
        s.write(
          "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{",
        ),
      );
      s.on("data", (d) => {
        if (d.toString().startsWith("HTTP/1.1 408")) answered408++;
      });
      s.on("error", () => undefined);
      s.on("close", () => closedAfter.push(performance.now() - t0));
    }
    // One byte a second on every connection still open.
    const trickle = setInterval(() => {
      for (const s of sockets) if (s.writable && !s.connecting) s.write(" ");
    }, 1000);
    try {
      await until(
        "every trickling connection to be closed",
        () => {
          if (closedAfter.length < N) peakFds = Math.max(peakFds, fds(pid));
          return closedAfter.length === N;
        },
        BODY_MS * 10,
      );
    } finally {
      clearInterval(trickle);
    }
    await until(
      "the gateway's file descriptors to come back",
      () => fds(pid) <= idleFds + 2,
      10_000,
    );
    const cut = () =>
      g
        .err()
        .split("\n")
        .filter((l) => l.includes('"msg":"request"'))
        .map((l) => JSON.parse(l) as { path: string; status: number; duration_ms: number })
        .filter((r) => r.path === "/v1/chat/completions");
    await until("a request line for every cut request", () => cut().length === N);
    const openMs = cut()
      .map((r) => r.duration_ms)
      .sort((a, b) => a - b);
    const figures = {
      idleFds,
      peakFds,
      afterFds: fds(pid),
      maxClosedAfterMs: Math.round(Math.max(...closedAfter)),
      answered408,
      gatewayOpenMs: {
        min: openMs[0],
        p50: openMs[N >> 1],
        p99: openMs[Math.floor(N * 0.99)],
        max: openMs[N - 1],
      },
    };
    console.log(`slow-body figures: ${JSON.stringify(figures)}`);
    // Not vacuous: the connections were all open at once.
    expect(peakFds).toBeGreaterThan(idleFds + N / 2);
    // Never before the deadline, and in the gateway each request was cut within CUT_BOUND_MS after it.
    expect(Math.min(...closedAfter)).toBeGreaterThanOrEqual(BODY_MS);
    for (const r of cut()) expect(r.status).toBe(0);
    expect(openMs[0]).toBeGreaterThanOrEqual(BODY_MS);
    expect(openMs[N - 1]).toBeLessThan(BODY_MS + CUT_BOUND_MS);
    expect(answered408).toBe(N);
    expect(
      await metricValue(g.url, 'kvctl_gateway_listener_cuts_total{reason="request_timeout"}'),
    ).toBe(N);
    g.child.kill("SIGTERM");
  }, 120_000);

  it("a 1 GiB KV-event message is refused by ZMQ unread: kvctl watch and the gateway stay within 64 MiB of idle and go on", async () => {
    const pub = tsx(["test/helpers/oversize-publisher.ts"]);
    const pubLines = createInterface({ input: pub.child.stdout });
    const lines: string[] = [];
    pubLines.on("line", (l) => lines.push(l));
    await until("the publisher", () => lines.some((l) => l.startsWith("READY ")));
    const endpoint = (lines.find((l) => l.startsWith("READY ")) as string).slice(6);

    const watch = tsx([
      "src/cli/bin.ts",
      "watch",
      "--zmq",
      `w0=${endpoint}`,
      "--interval",
      "0.2",
      "--json",
      "--log-interval",
      "1",
    ]);
    let watchSeq = -1;
    createInterface({ input: watch.child.stdout }).on("line", (l) => {
      const row = JSON.parse(l).workers[0];
      if (row.seq !== null) watchSeq = row.seq;
    });
    const w = await worker();
    const g = await gatewayProcess(
      `workers:\n  - id: w0\n    url: ${w.url}\n    events: ${endpoint}\nprobeWorkers: false\n`,
    );
    const batches = () => metricValue(g.url, 'kvctl_gateway_kv_event_batches_total{worker="w0"}');
    await until(
      "both consumers to receive batches",
      async () => watchSeq >= 0 && (await batches()) > 0,
    );
    const pids = { watch: watch.child.pid as number, gateway: g.child.pid as number };
    const before = { watch: rssMb(pids.watch), gateway: rssMb(pids.gateway) };
    const max = { ...before };
    const sampler = setInterval(() => {
      for (const k of ["watch", "gateway"] as const) max[k] = Math.max(max[k], rssMb(pids[k]));
    }, 20);
    closers.push(() => clearInterval(sampler));
    pub.child.stdin.write("big 1024\n");
    await until("the big message to be sent", () => lines.some((l) => l.startsWith("SENT ")));
    const bigSeq = Number((lines.find((l) => l.startsWith("SENT ")) as string).slice(5));
    await until(
      "both consumers to drop the connection",
      async () =>
        /was dropped unread/.test(watch.err()) &&
        (await metricValue(g.url, 'kvctl_gateway_kv_events_refused_total{worker="w0"}')) >= 1,
    );
    // They go on: batches after the big one arrive (ZMQ reconnected).
    const after = await batches();
    await until(
      "batches after the big one",
      async () => watchSeq > bigSeq + 2 && (await batches()) > after + 2,
    );
    clearInterval(sampler);
    for (const k of ["watch", "gateway"] as const) max[k] = Math.max(max[k], rssMb(pids[k]));
    console.log(`oversize figures: ${JSON.stringify({ rssBeforeMb: before, rssMaxMb: max })}`);
    expect(max.watch - before.watch).toBeLessThan(64);
    expect(max.gateway - before.gateway).toBeLessThan(64);
    // Logged once (the rate limiter's interval), however often ZMQ reconnects.
    expect(
      watch.err().match(/over 67108864 bytes \(or bad framing\) was dropped unread/g)?.length,
    ).toBe(1);
    pub.child.stdin.end();
  }, 120_000);
});
