// The official SDKs through the gateway, on one real test bed: two real patched SGLang workers on
// CPU (kvctl on, the tiny model; w0 on SGLang's Rust tree core, accepting what kvctl carries there,
// w1 on its Python tree core, accepting every command) behind a gateway running the agent policy with a real nats-server,
// and a third worker with kvctl off. The examples a user copies (examples/) give the same output
// through the gateway as against a worker directly (ids aside; cached_tokens asserted positive,
// since how much is cached depends on what ran before); every other route an SDK calls answers
// as the worker does; errors come in the caller's dialect; timeouts do not cost a second
// generation; a worker without kvctl's tokenize route still gets its Anthropic prompts' ids; and
// `stream` and Content-Type are judged as the worker judges them.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway } from "../src/app/gateway.js";
import type { Gateway, GatewayConfigInput } from "../src/gateway/index.js";
import { packageRoot, venvPython } from "../src/paths.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let nats: NatsServer;
let jsDir: string;
let w0: SglangServer;
let w1: SglangServer;
let plain: SglangServer;
let gw: Gateway;
const gateways: Gateway[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-sdk-js-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  const args = ["--enable-cache-report", "--enable-response-store"];
  [w0, w1, plain] = await Promise.all([
    startSglangServer({
      natsUrl: nats.url,
      workerId: "w0",
      kvctlCommands: "rust",
      storageDir: "",
      readyTimeoutS: 540,
      extraArgs: args,
    }),
    startSglangServer({
      natsUrl: nats.url,
      workerId: "w1",
      storageDir: "",
      readyTimeoutS: 540,
      extraArgs: args,
    }),
    startSglangServer({ workerId: "plain", storageDir: "", readyTimeoutS: 540, extraArgs: args }),
  ]);
  gw = await gateway([w0, w1], { policy: "agent" });
}, 600_000);

afterAll(async () => {
  for (const g of gateways) await g.close().catch(() => undefined);
  await Promise.all([w0, w1, plain].filter(Boolean).map((s) => s.stop()));
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

async function gateway(
  workers: SglangServer[],
  extra: Partial<GatewayConfigInput> = {},
  log: (l: string) => void = () => undefined,
): Promise<Gateway> {
  const g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: workers.map((s) => ({ id: s.info.worker_id, url: s.baseUrl })),
      nats: { url: nats.url, opTimeoutMs: 5000 },
      sessions: { bucket: `sdk_test_${gateways.length}`, idleAfterSeconds: 0 },
      // SGLang's /health runs a one-token generation (a second at least, more on a loaded box).
      health: { intervalMs: 1000, timeoutMs: 15_000, failures: 3 },
      ...extra,
    },
    log,
  });
  gateways.push(g);
  return g;
}

/** Runs a script to its end (asynchronously: the gateways it calls live in this process). */
async function run(cmd: string, args: string[]): Promise<string> {
  const child = spawn(cmd, args, { cwd: packageRoot, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const [code] = (await once(child, "close")) as [number | null];
  if (code !== 0) throw new Error(`${cmd} ${args.join(" ")} exited ${code}:\n${out}\n${err}`);
  return out;
}

const steps = (out: string) =>
  out
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
const withoutCache = (s: Record<string, unknown>[]) =>
  s.map(({ cached_tokens: _c, ...rest }) => rest);

describe("the examples give through the gateway what they give against a worker", () => {
  it("the kvctl workers run one on each SGLang tree core; the plain one on SGLang's default", () => {
    expect([w0.info.tree_core, w1.info.tree_core, plain.info.tree_core]).toEqual([
      "rust",
      "python",
      null,
    ]);
  });
  const examples: [string, string, (base: string) => string[]][] = [
    ["OpenAI Python SDK", venvPython, (b) => ["examples/openai_sdk.py", "--base-url", `${b}/v1`]],
    ["Anthropic Python SDK", venvPython, (b) => ["examples/anthropic_sdk.py", "--base-url", b]],
    [
      "OpenAI Node SDK",
      process.execPath,
      (b) => ["examples/openai-sdk.mjs", "--base-url", `${b}/v1`],
    ],
  ];
  for (const [name, cmd, args] of examples) {
    it(`${name}: streaming, a tool call and its follow-up, cached_tokens`, async () => {
      const direct = steps(await run(cmd, args(w0.baseUrl)));
      const via = steps(await run(cmd, args(gw.url)));
      expect(via.map((s) => s.step)).toEqual(
        expect.arrayContaining(["stream", "tool_call", "follow_up"]),
      );
      expect(withoutCache(via)).toEqual(withoutCache(direct));
      expect(via.find((s) => s.step === "tool_call")?.calls).toEqual(
        expect.arrayContaining([expect.anything()]),
      );
      // The follow-up repeats the conversation so far: the worker serves it from its cache.
      expect(via.find((s) => s.step === "follow_up")?.cached_tokens).toBeGreaterThan(0);
      expect(direct.find((s) => s.step === "follow_up")?.cached_tokens).toBeGreaterThan(0);
    }, 300_000);
  }
});

describe("every other route an SDK calls", () => {
  it("answers through the gateway as the worker does (models, count_tokens, embeddings, rerank, tokenize, detokenize, responses, n=2 with logprobs, completions)", async () => {
    const direct = JSON.parse(
      await run(venvPython, ["test/fixtures/sdk_checks.py", "routes", w0.baseUrl]),
    );
    const via = JSON.parse(
      await run(venvPython, ["test/fixtures/sdk_checks.py", "routes", gw.url]),
    );
    expect(via).toEqual(direct);
    expect(via["models.retrieve"].ok.id).toBe(w0.info.model);
    expect(via["messages.count_tokens"].ok).toBeGreaterThan(0);
    // A stored response is found on whichever worker made it.
    expect(via["responses.retrieve"]).toEqual({ ok: via["responses.create"].text });
  }, 300_000);
});

describe("errors in the caller's dialect", () => {
  it("the SDKs raise their own exception types with the body parsed", async () => {
    const e = JSON.parse(await run(venvPython, ["test/fixtures/sdk_checks.py", "errors", gw.url]));
    expect(e["openai 404"]).toMatchObject({
      error: "NotFoundError",
      module: "openai",
      status: 404,
      body: { type: "not_found", message: "no route GET /v1/no-such-route" },
    });
    expect(e["openai 400"]).toMatchObject({
      error: "BadRequestError",
      module: "openai",
      status: 400,
      body: { type: "invalid_request_error", param: "header x-session-id" },
    });
    expect(e["anthropic 404"]).toMatchObject({
      error: "NotFoundError",
      module: "anthropic",
      status: 404,
      body: { type: "error", error: { type: "not_found_error" } },
    });
    expect(e["anthropic 400"]).toMatchObject({
      error: "BadRequestError",
      module: "anthropic",
      status: 400,
      body: { type: "error", error: { type: "invalid_request_error" } },
    });
  }, 120_000);
});

async function chatCounts(g: Gateway): Promise<string[]> {
  const text = await (await fetch(`${g.url}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith("kvctl_gateway_requests_total{") && l.includes('route="chat"'));
}

describe("timeouts that mean what they say", () => {
  it("a non-streamed generation longer than the header timeout is not cut", async () => {
    const g = await gateway([w0], { limits: { upstreamHeadersTimeoutMs: 200 } });
    const r = JSON.parse(await run(venvPython, ["test/fixtures/sdk_checks.py", "long", g.url]));
    expect(r.ok).toBe(800);
    expect(r.seconds).toBeGreaterThan(0.2);
  }, 120_000);

  it("a generation past the response timeout is a 504 the SDK does not send again", async () => {
    const g = await gateway([w0], { limits: { upstreamResponseTimeoutMs: 1000 } });
    const r = JSON.parse(await run(venvPython, ["test/fixtures/sdk_checks.py", "timeout", g.url]));
    expect(r).toMatchObject({ error: "InternalServerError", status: 504 });
    // max_retries=2, yet one request reached the gateway (and one generation the worker).
    expect(await chatCounts(g)).toEqual([
      `kvctl_gateway_requests_total{route="chat",worker="w0",status="504"} 1`,
    ]);
  }, 120_000);
});

describe("a worker without kvctl's tokenize route", () => {
  it("is found once at start, logged once, and its Anthropic turns still get their prompt ids", async () => {
    const logs: string[] = [];
    const g = await gateway([plain], {}, (l) => logs.push(l));
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
    for (const turn of [1, 2]) {
      const msgs =
        turn === 1
          ? body.messages
          : [
              ...body.messages,
              { role: "assistant", content: "ok" },
              { role: "user", content: "More." },
            ];
      const r = await fetch(`${g.url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-session-id": "plain-1" },
        body: JSON.stringify({ ...body, messages: msgs }),
      });
      expect(r.status).toBe(200);
      const usage = (
        (await r.json()) as { usage: { input_tokens: number; cache_read_input_tokens?: number } }
      ).usage;
      await g.settled();
      const rec = await g.sessions.get("plain-1");
      expect(rec?.turns.at(-1)?.promptBlocks).toBe(
        Math.floor((usage.input_tokens + (usage.cache_read_input_tokens ?? 0)) / 16),
      );
      expect(rec?.turns.at(-1)?.promptBlocks).toBeGreaterThan(2);
    }
    expect(logs.filter((l) => l.includes("has no /kvctl/v1/messages/tokenize"))).toHaveLength(1);
    expect(logs.filter((l) => l.includes("tokenize"))).toHaveLength(1);
  }, 120_000);
});

describe("stream and Content-Type as the worker judges them", () => {
  const send = async (base: string, path: string, body: unknown, contentType: string | null) => {
    // Bytes, not a string: fetch would label a string body text/plain.
    const r = await fetch(`${base}${path}`, {
      method: "POST",
      headers: contentType === null ? {} : { "content-type": contentType },
      body: Buffer.from(JSON.stringify(body)),
    });
    const text = await r.text();
    return {
      status: r.status,
      sse: (r.headers.get("content-type") ?? "").includes("event-stream"),
      anthropic: text.startsWith('{"type":"error"'),
    };
  };
  const bodies: [string, (stream: unknown) => unknown][] = [
    [
      "/v1/chat/completions",
      (stream) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, stream }),
    ],
    ["/v1/completions", (stream) => ({ prompt: "hi", max_tokens: 2, stream })],
    [
      "/v1/messages",
      (stream) => ({
        model: "default",
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
        stream,
      }),
    ],
    ["/generate", (stream) => ({ text: "hi", sampling_params: { max_new_tokens: 2 }, stream })],
  ];

  it("a non-boolean stream is accepted or refused as the worker does, and streams when the worker would", async () => {
    for (const [path, body] of bodies) {
      for (const stream of [true, "true", "Yes", 1, 0, "off", null, 2, "maybe"]) {
        const direct = await send(w0.baseUrl, path, body(stream), "application/json");
        const via = await send(gw.url, path, body(stream), "application/json");
        expect({ path, stream, status: via.status, sse: via.sse }).toEqual({
          path,
          stream,
          status: direct.status,
          sse: direct.sse,
        });
      }
    }
  }, 180_000);

  it("a non-JSON Content-Type is refused as the worker refuses it, in the route's dialect", async () => {
    for (const [path, body] of bodies) {
      for (const ct of [
        "text/plain",
        null,
        "application/vnd.kvctl+json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
      ]) {
        const direct = await send(w0.baseUrl, path, body(false), ct);
        const via = await send(gw.url, path, body(false), ct);
        expect({ path, ct, status: via.status, anthropic: via.anthropic }).toEqual({
          path,
          ct,
          status: direct.status,
          anthropic: direct.anthropic,
        });
      }
    }
  }, 180_000);
});
