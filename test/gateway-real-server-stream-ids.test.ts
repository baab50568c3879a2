// Output token ids of streamed chat turns, against a real patched SGLang 0.5.23 server on CPU (the
// bench's agent model, its reasoning parser on) and a real nats-server: the gateway asks the worker
// for the stream's output ids, the turn record gets exactly the ids the worker produced (the same
// as a non-streamed answer's response_token_ids at temperature 0), so the think rule locates the
// reasoning span and sends Think, which the worker acks; and the client's stream holds the same
// events, byte for byte, as one straight from the worker without the ask.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentModel } from "../bench/agent/stack.js";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import type { Observation, TurnFinished } from "../src/contract/observations.js";
import { agentPolicy } from "../src/policy/agent-policy.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { pollFor } from "./helpers/poll.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let nats: NatsServer;
let jsDir: string;
let server: SglangServer;
let g: Gateway;
const seen: Observation[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-stream-ids-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  server = await startSglangServer({
    model: agentModel(),
    natsUrl: nats.url,
    workerId: "w0",
    storageDir: "",
    maxTotalTokens: 4096,
    hostRatio: 2,
    readyTimeoutS: 540,
    extraArgs: [
      "--enable-cache-report",
      "--reasoning-parser",
      "qwen3",
      "--context-length",
      "32768",
    ],
  });
  g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: [{ id: "w0", url: server.baseUrl }],
      nats: { url: nats.url, opTimeoutMs: 5000, commandTimeoutMs: 30_000 },
      sessions: { bucket: "stream_ids_sessions", idleAfterSeconds: 0 },
      health: { intervalMs: 60_000, timeoutMs: 30_000, failures: 3 },
      policy: "agent",
    },
    // The agent policy, with every observation it gets kept for the test.
    policy: (env) => {
      const p = agentPolicy(env);
      return { name: p.name, observe: (o) => (seen.push(o), p.observe(o)) };
    },
    log: () => undefined,
  });
}, 600_000);

afterAll(async () => {
  await g?.close().catch(() => undefined);
  await server?.stop();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

const SYSTEM = "You are a careful agent. Think before acting, and keep every answer short. ".repeat(
  6,
);
const request = (user: string, stream: boolean) => ({
  messages: [
    { role: "system", content: SYSTEM },
    { role: "user", content: user },
  ],
  max_tokens: 96,
  temperature: 0,
  regex: "<think>[a-z ]{48}</think>[a-z ]{12}",
  stream,
  ...(stream ? { stream_options: { include_usage: true } } : {}),
});

async function streamText(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<string> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  expect(r.status).toBe(200);
  return r.text();
}

// What differs between two runs of one request by construction: the response id, the creation
// second, how much of the prompt the cache served (the first run warmed it), and where the worker
// cut the text into deltas (it coalesces tokens by timing). So: every event that is not a text
// delta, byte for byte after that normalisation, and the deltas' text joined.
const normalised = (s: string) =>
  s
    .replace(/"id":"[^"]*"/g, '"id":"-"')
    .replace(/"created":\d+/g, '"created":0')
    .replace(/"prompt_tokens_details":(null|\{[^}]*\})/g, '"prompt_tokens_details":-');

function streamShape(text: string): { reasoning: string; content: string; events: string[] } {
  const out = { reasoning: "", content: "", events: [] as string[] };
  for (const ev of text.split("\n\n").filter((e) => e !== "")) {
    const j = ev.startsWith("data: {") ? JSON.parse(ev.slice(6)) : null;
    const c = j?.choices?.[0];
    const d = c?.delta;
    const keys = d ? Object.keys(d).filter((k) => d[k] !== null) : [];
    if (
      d &&
      c.finish_reason === null &&
      keys.length === 1 &&
      (keys[0] === "reasoning_content" || keys[0] === "content")
    ) {
      if (keys[0] === "reasoning_content") out.reasoning += d.reasoning_content;
      else out.content += d.content;
    } else out.events.push(normalised(ev));
  }
  return out;
}

async function finishedOf(session: string): Promise<TurnFinished> {
  await g.settled();
  const f = seen.filter(
    (o): o is TurnFinished => o.type === "TurnFinished" && o.sessionId === session,
  );
  expect(f.length).toBe(1);
  return f[0];
}

describe("gateway: output ids of streamed chat turns from a real SGLang server", () => {
  it("records the worker's exact output ids for a streamed turn, the think rule acts on them, and the client's stream is unchanged", async () => {
    const user = "List the files in the current directory.";
    // The reference: the same request not streamed, with the worker's own token ids.
    const whole = await fetch(`${server.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...request(user, false), return_token_ids: true }),
    });
    const ref = (await whole.json()) as {
      choices: { response_token_ids: number[]; message: { reasoning_content: string | null } }[];
    };
    const refIds = ref.choices[0].response_token_ids;
    expect(refIds.length).toBeGreaterThan(20);
    // The qwen3 parser takes the answer as reasoning up to </think> (SGLang constrains only what
    // follows the reasoning, so the tiny model's span is its own): there is some.
    expect(ref.choices[0].message.reasoning_content?.length).toBeGreaterThan(0);

    const direct = await streamText(server.baseUrl, request(user, true));
    const viaGateway = await streamText(g.url, request(user, true), { "x-session-id": "streamed" });
    // The worker did send the ids event on the gateway's leg; none of it reached the client.
    expect(viaGateway).not.toContain("sglext_ids");
    expect(viaGateway).not.toContain("output_ids");
    const [g1, d1] = [streamShape(viaGateway), streamShape(direct)];
    expect(g1.reasoning.length).toBeGreaterThan(0);
    expect(g1).toEqual(d1);

    const f = await finishedOf("streamed");
    expect(f.outputTokens).toEqual(refIds);
    expect(f.ranges?.reasoning).not.toBeNull();
    expect(f.ranges?.output).toEqual({
      start: f.promptTokens?.length,
      end: (f.promptTokens?.length ?? 0) + refIds.length,
    });

    // The think rule marks the reasoning blocks, and the worker acks the command.
    const rec = await pollFor(
      "an acked Think command",
      async () => {
        await g.settled();
        return g.sessions.get("streamed");
      },
      (r) => r?.commands.some((c) => c.type === "Think" && c.state !== "sent") === true,
      { detail: (r) => JSON.stringify(r?.commands) },
    );
    expect(rec?.commands.find((c) => c.type === "Think")?.state).toBe("applied");
  }, 300_000);

  it("leaves the ids to a client that asked for them itself", async () => {
    const body = {
      ...request("Show the current directory.", true),
      return_output_ids_in_sglext: true,
    };
    const text = await streamText(g.url, body, { "x-session-id": "own-ids" });
    expect(text).toContain('"output_ids"');
    expect(text).not.toContain("sglext_ids");
    const f = await finishedOf("own-ids");
    expect(f.outputTokens?.length).toBeGreaterThan(20);
  }, 300_000);
});
