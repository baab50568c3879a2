// The agent policy in front of a real patched SGLang server on CPU (the tiny model, a small device
// pool, HiCache host tier) with a real nats-server: a cache_control breakpoint on the system
// prompt becomes a pin of exactly the blocks the worker's template puts before it (positions from
// the worker's tokenizer), the worker's subscriber acks it, a flood of unrelated prompts that
// churns both tiers is still served in full (pins hold host copies only, under the worker's
// budget: no wedge), and the pinned prefix is still served from cache afterwards.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";
import { recordWhen } from "./helpers/poll.js";

let nats: NatsServer;
let jsDir: string;
let server: SglangServer;
let g: Gateway;
const decisions: Record<string, unknown>[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-policy-real-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  server = await startSglangServer({
    natsUrl: nats.url,
    workerId: "w0",
    storageDir: "",
    maxTotalTokens: 2048,
    hostRatio: 2,
    readyTimeoutS: 540,
    extraArgs: ["--enable-cache-report"],
  });
  g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: [{ id: "w0", url: server.baseUrl }],
      nats: { url: nats.url, opTimeoutMs: 5000 },
      sessions: { bucket: "policy_real_sessions", idleAfterSeconds: 0 },
      health: { intervalMs: 60_000, timeoutMs: 15_000, failures: 3 },
      jsonLog: true,
      policy: "agent",
    },
    decisionLog: (l) => decisions.push(JSON.parse(l)),
    log: () => undefined,
  });
}, 600_000);

afterAll(async () => {
  await g?.close().catch(() => undefined);
  await server?.stop();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

const post = async (
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: any }> => {
  const r = await fetch(`${g.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
};

const SYSTEM_TEXT =
  "You are a careful agent. Think before acting, and keep every answer short. ".repeat(8);
const system = {
  role: "system",
  content: [{ type: "text", text: SYSTEM_TEXT, cache_control: { type: "ephemeral", ttl: "1h" } }],
};
const chat = (user: string) => ({
  messages: [system, { role: "user", content: user }],
  max_tokens: 1,
  temperature: 0,
});

describe("agent policy on a real SGLang server", () => {
  it("pins the system prompt at its marker; a flood after it is served in full; the pinned prefix stays cached", async () => {
    const first = await post("/v1/chat/completions", chat("Hello."), { "x-session-id": "pinned" });
    expect(first.status).toBe(200);
    const rec = await recordWhen(g, "pinned", (r) => r.commands.some((c) => c.type === "Cache"));
    const pin = rec.commands.find((c) => c.type === "Cache");
    expect(pin?.state).toBe("applied");
    // The pin covers the full pages of the system message as the worker's template renders it.
    const sys = (await (
      await fetch(`${server.baseUrl}/v1/tokenize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [system], add_generation_prompt: false }),
      })
    ).json()) as { tokens: number[] };
    expect(Array.isArray(sys.tokens)).toBe(true);
    const page = server.info.page_size;
    const pinnedBlocks = rec.pins[0].blockHashes.length;
    expect(pinnedBlocks).toBeGreaterThan(0);
    expect(pinnedBlocks).toBeLessThanOrEqual(Math.floor(sys.tokens.length / page));
    expect(pinnedBlocks).toBeGreaterThanOrEqual(Math.floor(sys.tokens.length / page) - 1);

    // A flood of unrelated prompts, several times the device pool and the host tier together.
    const words = [
      "radix",
      "page",
      "tier",
      "lease",
      "budget",
      "prefix",
      "token",
      "host",
      "device",
      "evict",
      "flood",
      "worker",
    ];
    const prompt = (i: number) =>
      Array.from(
        { length: 220 },
        (_, j) => words[(i * 7 + j * (i + 3)) % words.length] + ((i * 31 + j) % 97),
      ).join(" ");
    const statuses: number[] = [];
    let flooded = 0;
    for (let i = 0; i < 40; i += 4) {
      const batch = await Promise.all(
        [0, 1, 2, 3].map((k) =>
          post("/v1/completions", { prompt: prompt(i + k), max_tokens: 1, temperature: 0 }),
        ),
      );
      statuses.push(...batch.map((b) => b.status));
      for (const b of batch) flooded += b.json.usage?.prompt_tokens ?? 0;
    }
    expect(statuses).toEqual(new Array(40).fill(200));
    expect(flooded).toBeGreaterThan(2048 * (1 + 2));
    // The flood did evict: its own first prompt, unpinned, is mostly gone from both tiers.
    const control = await post("/v1/completions", {
      prompt: prompt(0),
      max_tokens: 1,
      temperature: 0,
    });
    expect(control.json.usage.prompt_tokens_details.cached_tokens).toBeLessThan(
      control.json.usage.prompt_tokens / 2,
    );

    // The pinned prefix comes back from cache (device or the host copy the pin kept).
    const again = await post("/v1/chat/completions", chat("Another question."), {
      "x-session-id": "returning",
    });
    expect(again.status).toBe(200);
    expect(again.json.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(
      pinnedBlocks * page,
    );
    expect(
      decisions.some((d) => d.event === "command" && d.type === "Cache" && d.state === "acked"),
    ).toBe(true);
  }, 600_000);

  it("an Anthropic cache_control breakpoint on /v1/messages pins the system prompt as the worker renders it", async () => {
    const MESSAGES_SYSTEM =
      "You answer through the Messages API, briefly and to the point. ".repeat(8);
    const body = {
      model: "m",
      max_tokens: 1,
      temperature: 0,
      system: [
        { type: "text", text: MESSAGES_SYSTEM, cache_control: { type: "ephemeral", ttl: "1h" } },
      ],
      messages: [{ role: "user", content: "Hello from the Messages API." }],
    };
    const r = await post("/v1/messages", body, { "x-session-id": "anthropic" });
    expect(r.status).toBe(200);
    expect(r.json.type).toBe("message");
    const rec = await recordWhen(g, "anthropic", (x) =>
      x.commands.some((c) => c.type === "Cache" && c.state === "applied"),
    );
    // The prompt as the worker renders it (its Anthropic -> chat conversion and template), and the
    // system message alone: the pin ends at the last full page of the system part.
    const tok = async (path: string, b: unknown) =>
      (
        (await (
          await fetch(`${server.baseUrl}${path}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(b),
          })
        ).json()) as { tokens: number[] }
      ).tokens;
    const full = await tok("/kvctl/v1/messages/tokenize", body);
    const sys = await tok("/v1/tokenize", {
      messages: [{ role: "system", content: MESSAGES_SYSTEM }],
      add_generation_prompt: false,
    });
    expect(full.slice(0, sys.length)).toEqual(sys);
    const page = server.info.page_size;
    expect(rec.pins.length).toBeGreaterThan(0);
    expect(rec.pins[0].blockHashes.length).toBe(Math.floor(sys.length / page));
    // Those are the first blocks of the session's chain (the prompt's hashes in the worker's scheme).
    expect(rec.chain.slice(0, rec.pins[0].blockHashes.length)).toEqual(rec.pins[0].blockHashes);
  }, 600_000);
});
