// Gateway overhead bench (`npm run bench:gateway [-- --json]`): the same requests sent straight to
// an upstream and through the gateway in front of it, in one run:
//   (a) non-streaming chat at concurrency 1: added p50/p99 latency per request;
//   (b) streaming chat at concurrency 1: added p50/p99 latency per streamed chunk (the upstream
//       stamps each chunk with its send time; the client subtracts it on arrival);
//   (c) non-streaming chat at concurrency 64: requests/s direct vs through, medians of alternating
//       1 s windows.
// The upstream is a stub, a tiny node:http server standing in for the worker so the worker is
// not what is measured: it answers chat like SGLang does (token ids when asked for, SSE when
// streaming) and /v1/tokenize. Three processes: the gateway, the stub and the load generator,
// placed by the OS on the machine's cores; with --pin (taskset) the gateway gets CPU 0 and the stub
// and load generator CPU 1 (on a machine shared with other work, a pinned CPU's neighbours decide
// the figures). Pinned is the split the throughput bar is read on: unpinned, the direct run has
// both cores for the stub and load generator, while through the gateway they give one up to it.
// The gateway measured is the one `kvctl gateway` runs: the compiled dist/ (npm install builds it;
// the bench refuses a dist/ older than src/) under the node flags of bin/kvctl.js's first line.
// Bars: added p50 <= 1 ms; requests/s through the gateway >= 0.5x direct at concurrency 64.
// --smoke: a tenth of the requests, two 0.2 s windows (the test that the bench still runs).
// --auth: the gateway checks a tenant key on every request (hash lookup, tenant rate and
// concurrency limits, session ownership) and sends the worker a key of its own on every call.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";

const args = process.argv.slice(2);
const JSON_OUT = args.includes("--json");
const role = args.includes("--role") ? args[args.indexOf("--role") + 1] : "main";
const CHUNKS = 16;
const PIN = args.includes("--pin");
const SMOKE = args.includes("--smoke");
const AUTH = args.includes("--auth");
const BENCH_KEY = "bench-tenant-key-0123456789";
const WINDOWS = SMOKE ? 2 : 9;
const WINDOW_MS = SMOKE ? 200 : 1000;
const SCALE = SMOKE ? 10 : 1; // request counts are divided by it

function now(): number {
  return performance.timeOrigin + performance.now();
}

async function runStub(): Promise<void> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
      if (req.url === "/v1/tokenize") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          '{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18],"count":18,"max_model_len":4096}',
        );
        return;
      }
      if (req.url === "/health") {
        res.writeHead(200).end();
        return;
      }
      if (body.stream) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        let i = 0;
        const tick = () => {
          if (i++ < CHUNKS) {
            res.write(
              `data: {"id":"c","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}],"t":${now()}}\n\n`,
            );
            setTimeout(tick, 1);
          } else {
            res.end(
              `data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"t":${now()}}\n\ndata: [DONE]\n\n`,
            );
          }
        };
        tick();
        return;
      }
      const ids = body.return_token_ids
        ? ',"prompt_token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18],"response_token_ids":[19,20]'
        : "";
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}${ids},"finish_reason":"stop"}],"usage":{"prompt_tokens":18,"completion_tokens":2,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":16}}}`,
      );
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
}

async function runGateway(upstream: string): Promise<void> {
  const { createGateway } = await import(new URL("../dist/gateway/index.js", import.meta.url).href);
  const { hashKey } = await import(new URL("../dist/gateway/auth/keys.js", import.meta.url).href);
  const auth = {
    tenants: [
      { id: "bench", keys: [hashKey(BENCH_KEY)], requestsPerSecond: 1e9, maxConcurrent: 1e6 },
    ],
  };
  const g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: [
        { id: "stub", url: upstream, ...(AUTH ? { apiKey: "bench-worker-key-0123" } : {}) },
      ],
      ...(AUTH ? { auth } : {}),
      probeWorkers: false,
      health: { intervalMs: 600_000, timeoutMs: 5000, failures: 3 },
      sessions: { idleAfterSeconds: 0 },
    },
    log: () => undefined,
  });
  process.stdout.write(`${JSON.stringify({ port: g.port })}\n`);
}

function pinned(cpu: number): string[] {
  if (!PIN) return [];
  try {
    execFileSync("taskset", ["-c", String(cpu), "true"], { stdio: "ignore" });
    return ["taskset", "-c", String(cpu)];
  } catch {
    return [];
  }
}

async function child(
  roleName: string,
  cpu: number,
  extra: string[],
): Promise<{ proc: ChildProcess; port: number }> {
  const pin = pinned(cpu);
  const flags = roleName === "gateway" ? BIN_NODE_FLAGS : [];
  const cmd = [
    ...pin,
    process.execPath,
    ...flags,
    ...(process.env.KVCTL_BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []),
    "--import",
    "tsx",
    fileURLToPath(import.meta.url),
    "--role",
    roleName,
    ...extra,
  ];
  const proc = spawn(cmd[0], cmd.slice(1), { stdio: ["ignore", "pipe", "inherit"] });
  let buf = "";
  for await (const d of proc.stdout as AsyncIterable<Buffer>) {
    buf += d.toString();
    const nl = buf.indexOf("\n");
    if (nl >= 0) return { proc, port: JSON.parse(buf.slice(0, nl)).port };
  }
  throw new Error(`${roleName} exited before reporting its port`);
}

/** The node flags `kvctl` runs with: those on bin/kvctl.js's `#!/usr/bin/env -S node ...` line. */
const BIN_NODE_FLAGS = (() => {
  const first = readFileSync(new URL("../bin/kvctl.js", import.meta.url), "utf8").split("\n")[0];
  const m = /^#!\/usr\/bin\/env (?:-S )?node(.*)$/.exec(first);
  if (!m) throw new Error(`bin/kvctl.js: unexpected first line ${JSON.stringify(first)}`);
  return m[1].split(" ").filter(Boolean);
})();

/** Refuses to measure a dist/ older than its sources (the figures would be of other code). */
function distIsCurrent(): void {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const built = join(root, "dist/gateway/index.js");
  if (!existsSync(built))
    throw new Error(
      "dist/gateway/index.js is missing: run `npm run build` (npm install does it) first",
    );
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce(
      (m, e) =>
        Math.max(
          m,
          e.isDirectory()
            ? newest(join(dir, e.name))
            : e.name.endsWith(".ts")
              ? statSync(join(dir, e.name)).mtimeMs
              : 0,
        ),
      0,
    );
  if (newest(join(root, "src")) > statSync(built).mtimeMs)
    throw new Error(
      "dist/ is older than src/: run `npm run build` first, so the bench measures the code in src/",
    );
}

const CHAT = JSON.stringify({
  messages: [{ role: "user", content: "hello there" }],
  max_tokens: 2,
});
const STREAM = JSON.stringify({
  messages: [{ role: "user", content: "hello there" }],
  max_tokens: 2,
  stream: true,
});
const HEADERS: Record<string, string> = AUTH
  ? { "content-type": "application/json", authorization: `Bearer ${BENCH_KEY}` }
  : { "content-type": "application/json" };

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function latency(pool: Pool, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await pool.request({
      method: "POST",
      path: "/v1/chat/completions",
      headers: HEADERS,
      body: CHAT,
    });
    await r.body.text();
    if (r.statusCode !== 200) throw new Error(`HTTP ${r.statusCode}`);
    out.push(performance.now() - t0);
  }
  return out;
}

async function chunkLatency(pool: Pool, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await pool.request({
      method: "POST",
      path: "/v1/chat/completions",
      headers: HEADERS,
      body: STREAM,
    });
    let tail = "";
    for await (const c of r.body) {
      const at = now();
      tail += (c as Buffer).toString();
      let k: number;
      while ((k = tail.indexOf("\n\n")) >= 0) {
        const ev = tail.slice(0, k);
        tail = tail.slice(k + 2);
        const m = /"t":([\d.]+)\}$/.exec(ev);
        if (m) out.push(at - Number(m[1]));
      }
    }
  }
  return out;
}

async function throughput(pool: Pool, concurrency: number, ms: number): Promise<number> {
  let done = 0;
  const end = performance.now() + ms;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const r = await pool.request({
          method: "POST",
          path: "/v1/chat/completions",
          headers: HEADERS,
          body: CHAT,
        });
        await r.body.text();
        if (r.statusCode !== 200) throw new Error(`HTTP ${r.statusCode}`);
        done++;
      }
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

async function main(): Promise<void> {
  distIsCurrent();
  const pinnedOk = pinned(0).length > 0;
  const stub = await child("stub", 1, []);
  const gw = await child("gateway", 0, [
    "--upstream",
    `http://127.0.0.1:${stub.port}`,
    ...(AUTH ? ["--auth"] : []),
  ]);
  if (pinnedOk) execFileSync("taskset", ["-pc", "1", String(process.pid)], { stdio: "ignore" });
  const direct = new Pool(`http://127.0.0.1:${stub.port}`, { connections: 64 });
  const through = new Pool(`http://127.0.0.1:${gw.port}`, { connections: 64 });
  try {
    report(await measureBoth(direct, through), pinnedOk);
  } finally {
    await direct.close();
    await through.close();
    gw.proc.kill("SIGTERM");
    stub.proc.kill("SIGTERM");
  }
}

interface Measured {
  N: number;
  dl: number[];
  gl: number[];
  dc: number[];
  gc: number[];
  directWindows: number[];
  gatewayWindows: number[];
}

/** Latency at c=1 (whole answers and stream chunks), then throughput at c=64, direct and through. */
async function measureBoth(direct: Pool, through: Pool): Promise<Measured> {
  // Warm both paths (JIT, connection pools).
  await latency(direct, 300 / SCALE);
  await latency(through, 300 / SCALE);
  await chunkLatency(direct, 20 / SCALE);
  await chunkLatency(through, 20 / SCALE);
  // And at the measured concurrency: the pools' connections opened, the code compiled for it.
  await throughput(direct, 64, WINDOW_MS);
  await throughput(through, 64, WINDOW_MS);
  const N = 2000 / SCALE;
  const dl = await latency(direct, N);
  const gl = await latency(through, N);
  const dc = await chunkLatency(direct, 100 / SCALE);
  const gc = await chunkLatency(through, 100 / SCALE);
  // Alternating 1 s windows, medians of each side: a burst of other load on the machine lands
  // in one window of one side instead of deciding the ratio.
  const directWindows: number[] = [];
  const gatewayWindows: number[] = [];
  for (let i = 0; i < WINDOWS; i++) {
    directWindows.push(await throughput(direct, 64, WINDOW_MS));
    gatewayWindows.push(await throughput(through, 64, WINDOW_MS));
  }
  return { N, dl, gl, dc, gc, directWindows, gatewayWindows };
}

function report(m: Measured, pinnedOk: boolean): void {
  const { N, dl, gl, dc, gc, directWindows, gatewayWindows } = m;
  const directRps = pct(directWindows, 50);
  const gatewayRps = pct(gatewayWindows, 50);
  const r = {
    addedP50: pct(gl, 50) - pct(dl, 50),
    addedP99: pct(gl, 99) - pct(dl, 99),
    chunkAddedP50: pct(gc, 50) - pct(dc, 50),
    chunkAddedP99: pct(gc, 99) - pct(dc, 99),
  };
  const ratio = gatewayRps / directRps;
  const cores = pinnedOk
    ? "gateway on CPU 0; stub and load generator on CPU 1 (taskset)"
    : `not pinned: gateway, stub and load generator share the ${availableParallelism()} cores (OS placement)`;
  const f = (x: number) => x.toFixed(3);
  console.log(
    `gateway bench (${cores}${AUTH ? "; auth on: tenant key checked, worker key sent" : ""}; gateway from dist/ with node ${BIN_NODE_FLAGS.join(" ") || "(no flags)"})`,
  );
  console.log(
    `  non-streaming, c=1, ${N} requests: direct p50 ${f(pct(dl, 50))} ms p99 ${f(pct(dl, 99))} ms; through p50 ${f(pct(gl, 50))} ms p99 ${f(pct(gl, 99))} ms`,
  );
  console.log(
    `    added p50 ${f(r.addedP50)} ms (bar <= 1 ms: ${r.addedP50 <= 1 ? "PASS" : "FAIL"}), added p99 ${f(r.addedP99)} ms`,
  );
  console.log(
    `  streaming, c=1, per chunk (${dc.length} chunks): direct p50 ${f(pct(dc, 50))} ms; through p50 ${f(pct(gc, 50))} ms; added p50 ${f(r.chunkAddedP50)} ms, p99 ${f(r.chunkAddedP99)} ms`,
  );
  const w = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(" ");
  console.log(
    `  c=64, ${WINDOWS} alternating ${WINDOW_MS / 1000} s windows each: direct [${w(directWindows)}], through [${w(gatewayWindows)}] req/s`,
  );
  console.log(
    `    medians: direct ${directRps.toFixed(0)} req/s, through ${gatewayRps.toFixed(0)} req/s = ${ratio.toFixed(2)}x (bar >= 0.5x: ${ratio >= 0.5 ? "PASS" : "FAIL"})`,
  );
  if (!JSON_OUT) return;
  console.log(
    JSON.stringify({
      bench: "gateway",
      added_p50_ms: +r.addedP50.toFixed(4),
      added_p99_ms: +r.addedP99.toFixed(4),
      chunk_added_p50_ms: +r.chunkAddedP50.toFixed(4),
      chunk_added_p99_ms: +r.chunkAddedP99.toFixed(4),
      req_per_s_c64: +gatewayRps.toFixed(1),
      direct_req_per_s_c64: +directRps.toFixed(1),
      ratio_c64: +ratio.toFixed(3),
      auth: AUTH,
      cores,
    }),
  );
}

// A clean exit on SIGTERM (a --cpu-prof child writes its profile on exit).
if (role !== "main") process.on("SIGTERM", () => process.exit(0));
if (role === "stub") await runStub();
else if (role === "gateway") await runGateway(args[args.indexOf("--upstream") + 1]);
else await main();
