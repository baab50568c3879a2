// SGLang's session radix cache engages on the request body's session_id, as bench:agent's
// session_radix configuration sends it: a real patched SGLang server on CPU with
// --enable-session-radix-cache is sent a chat request carrying `session_id`, then the session is
// closed; SGLang's own log says how many tree leaves it had tagged for the session, and the count
// must be non-zero (a session id that served nothing releases none). Behind the gateway, a session
// sent by header reaches the worker named in the body, and its close hint closes it there. kvctl
// is on, accepting the commands SGLang's Rust tree core carries: the session radix cache runs on
// SGLang's Python tree core only, and kvctl follows SGLang's own choice there (with its priority
// eviction policy).
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentModel } from "../bench/agent/stack.js";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { until } from "./helpers/poll.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let server: SglangServer;
let gw: Gateway | undefined;

beforeAll(async () => {
  server = await startSglangServer({
    model: agentModel(),
    kvctlCommands: "rust",
    pageSize: 16,
    maxTotalTokens: 4096,
    hostRatio: 2,
    storageDir: "",
    warmup: false,
    extraArgs: [
      "--enable-session-radix-cache",
      "--radix-eviction-policy",
      "priority",
      "--context-length",
      "32768",
    ],
    readyTimeoutS: 600,
  });
}, 900_000);

afterAll(async () => {
  await gw?.close();
  await server?.stop();
});

async function post(path: string, body: unknown): Promise<{ status: number; text: string }> {
  const r = await fetch(`${server.baseUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text() };
}

/** Waits for SGLang's log line on closing `id` (the readiness signal) and returns its leaf count. */
async function releasedLeaves(id: string): Promise<number> {
  const re = new RegExp(`release_session ${id}: indexed (\\d+) component leaves`);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const m = re.exec(readFileSync(server.info.log_path, "utf8"));
    if (m) return Number(m[1]);
    if (Date.now() > deadline)
      throw new Error(`no release_session line for ${id} in ${server.info.log_path}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("session radix cache", () => {
  it("with kvctl on, SGLang keeps the Python tree core its session radix cache needs", () => {
    expect(server.info.tree_core).toBe("python");
    expect(readFileSync(server.info.log_path, "utf8")).toMatch(
      /Using the Python TreeCore: session-aware caching requires the Python TreeCore/,
    );
  });

  it("tags the nodes of a session named in the request body, and releases them on close", async () => {
    const models = (await (await fetch(`${server.baseUrl}/v1/models`)).json()) as {
      data: { id: string }[];
    };
    const model = models.data[0].id;
    const messages = [
      { role: "system", content: "You are an agent. ".repeat(40) },
      { role: "user", content: "List the files in the current directory." },
    ];
    const r = await post("/v1/chat/completions", {
      model,
      messages,
      max_tokens: 4,
      temperature: 0,
      session_id: "bench-session-a",
    });
    expect(r.status, r.text).toBe(200);
    expect((await post("/close_session", { session_id: "bench-session-a" })).status).toBe(200);
    expect(await releasedLeaves("bench-session-a")).toBeGreaterThan(0);
    // Control: a session that sent nothing had nothing tagged.
    expect((await post("/close_session", { session_id: "bench-session-none" })).status).toBe(200);
    expect(await releasedLeaves("bench-session-none")).toBe(0);
  });

  it("behind the gateway: a session sent by header is named in the body the worker gets, and its close hint closes it there", async () => {
    gw = await createGateway({
      config: {
        listen: { host: "127.0.0.1", port: 0 },
        workers: [{ id: "w0", url: server.baseUrl }],
        health: { intervalMs: 60_000, timeoutMs: 15_000, failures: 3 },
      },
      log: () => undefined,
    });
    const messages = [
      { role: "system", content: "You are a careful agent. ".repeat(40) },
      { role: "user", content: "Read the README." },
    ];
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-session-id": "gw-session-b" },
      body: JSON.stringify({ model: "default", messages, max_tokens: 4, temperature: 0 }),
    });
    expect(r.status, await r.clone().text()).toBe(200);
    await r.text();
    await gw.settled();
    const hint = await fetch(`${gw.url}/kvctl/v1/sessions/gw-session-b/events`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ event: "close" }),
    });
    expect(hint.status).toBe(202);
    expect(await releasedLeaves("gw-session-b")).toBeGreaterThan(0);
    const closed =
      'kvctl_gateway_radix_session_releases_total{worker="w0",reason="ended",outcome="ok"} 1';
    await until("the gateway counted its close", async () =>
      (await (await fetch(`${gw?.url}/metrics`)).text()).includes(closed),
    );
  }, 300_000);
});
