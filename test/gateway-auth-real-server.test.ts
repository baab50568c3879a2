// A real patched SGLang server on CPU (the tiny model) started with --api-key and --admin-api-key,
// behind a gateway with client keys and a real nats-server: the gateway reaches it only because
// it sends the worker's key on every call (/server_info at start, tokenize, inference), a tenant's
// turn is served end to end and its session is that tenant's, and the worker's own kvctl routes
// refuse the inference key (only the admin key opens them).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { hashKey } from "../src/gateway/auth/keys.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

const API_KEY = "real-worker-api-key-0123";
const ADMIN_KEY = "real-worker-admin-key-0123";
const TENANT_A = "real-tenant-a-key-012345";
const TENANT_B = "real-tenant-b-key-012345";

let nats: NatsServer;
let jsDir: string;
let server: SglangServer;
let gw: Gateway | undefined;
const logs: string[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-gw-auth-real-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  server = await startSglangServer({
    natsUrl: nats.url,
    workerId: "w0",
    storageDir: "",
    readyTimeoutS: 540,
    extraArgs: ["--api-key", API_KEY, "--admin-api-key", ADMIN_KEY],
  });
  gw = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: [{ id: "w0", url: server.baseUrl, apiKey: API_KEY, adminApiKey: ADMIN_KEY }],
      nats: { url: nats.url, opTimeoutMs: 5000 },
      sessions: { bucket: "gw_auth_real", idleAfterSeconds: 0 },
      health: { intervalMs: 60_000, timeoutMs: 15_000, failures: 3 },
      policy: "agent",
      auth: {
        tenants: [
          // shared: SGLang 0.5.23's /v1/messages takes no cache_salt, so a salted tenant's
          // Anthropic turn is refused; this test is about the worker key on its tokenize route.
          { id: "a", keys: [hashKey(TENANT_A)], cacheIsolation: "shared" },
          { id: "b", keys: [hashKey(TENANT_B)], cacheIsolation: "shared" },
        ],
      },
    },
    log: (l) => logs.push(l),
  });
}, 600_000);

afterAll(async () => {
  await gw?.close();
  await server?.stop();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

const chat = (key: string, session: string) =>
  fetch(`${gw?.url}/v1/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${key}`,
      "x-session-id": session,
    },
    body: JSON.stringify({
      model: "default",
      messages: [{ role: "user", content: "Say hi." }],
      max_tokens: 4,
      temperature: 0,
    }),
  });

const kvctlRoute = (key: string | null) =>
  fetch(`${server.baseUrl}/hicache/inspect`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(key ? { authorization: `Bearer ${key}` } : {}),
    },
    body: JSON.stringify({ block_hashes: [1] }),
  });

describe("a real worker with --api-key and --admin-api-key behind a gateway with client keys", () => {
  it("the worker refuses calls without its key; through the gateway a tenant's turn is served and its session is the tenant's", async () => {
    const direct = await fetch(`${server.baseUrl}/v1/models`);
    expect(direct.status).toBe(401);
    const res = await chat(TENANT_A, "real-a");
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(res.status).toBe(200);
    expect(typeof body.choices[0]?.message.content).toBe("string");
    await gw?.settled();
    const owned = await gw?.sessions.get("a/real-a");
    expect(owned?.tenant).toBe("a");
    // Tenant b's "real-a" is a session of b's own (a tenant's ids are its own): a's is untouched.
    expect((await chat(TENANT_B, "real-a")).status).toBe(200);
    await gw?.settled();
    expect((await gw?.sessions.get("b/real-a"))?.tenant).toBe("b");
    expect(await gw?.sessions.get("a/real-a")).toEqual(owned);
    const models = await fetch(`${gw?.url}/v1/models`, { headers: { "x-api-key": TENANT_B } });
    expect(models.status).toBe(200);
  }, 300_000);

  it("an Anthropic turn's prompt ids come from the worker's /kvctl/v1/messages/tokenize, called with the worker's key", async () => {
    const res = await fetch(`${gw?.url}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": TENANT_A,
        "anthropic-version": "2023-06-01",
        "x-session-id": "real-m",
      },
      body: JSON.stringify({
        model: "default",
        max_tokens: 4,
        messages: [{ role: "user", content: "hello ".repeat(60) }],
      }),
    });
    expect(res.status).toBe(200);
    await gw?.settled();
    const rec = await gw?.sessions.get("a/real-m");
    expect(rec?.tenant).toBe("a");
    // The chain is hashed from the prompt ids the worker's tokenize route returned.
    expect(rec?.chain.length).toBeGreaterThan(0);
    expect(logs.filter((l) => /\b401\b/.test(l))).toEqual([]);
  }, 300_000);

  it("the worker's kvctl routes refuse the inference key and no key; the admin key opens them", async () => {
    expect((await kvctlRoute(null)).status).toBe(401);
    expect((await kvctlRoute(API_KEY)).status).toBe(401);
    const ok = await kvctlRoute(ADMIN_KEY);
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { status: string }).status).toBe("applied");
  }, 120_000);
});
