// SGLang's session radix cache engages on the request body's session_id, as bench:agent's
// session_radix configuration sends it: a real patched SGLang server on CPU with
// --enable-session-radix-cache is sent a chat request carrying `session_id`, then the session is
// closed; SGLang's own log says how many tree leaves it had tagged for the session, and the count
// must be non-zero (a session id that served nothing releases none).
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentModel } from "../bench/agent/stack.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let server: SglangServer;

beforeAll(async () => {
  server = await startSglangServer({
    model: agentModel(),
    pageSize: 16,
    maxTotalTokens: 4096,
    hostRatio: 2,
    storageDir: "",
    warmup: false,
    extraArgs: ["--enable-session-radix-cache", "--radix-eviction-policy", "priority", "--context-length", "32768"],
    readyTimeoutS: 600,
  });
}, 900_000);

afterAll(async () => {
  await server?.stop();
});

async function post(path: string, body: unknown): Promise<{ status: number; text: string }> {
  const r = await fetch(`${server.baseUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}

/** Waits for SGLang's log line on closing `id` (the readiness signal) and returns its leaf count. */
async function releasedLeaves(id: string): Promise<number> {
  const re = new RegExp(`release_session ${id}: indexed (\\d+) component leaves`);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const m = re.exec(readFileSync(server.info.log_path, "utf8"));
    if (m) return Number(m[1]);
    if (Date.now() > deadline) throw new Error(`no release_session line for ${id} in ${server.info.log_path}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("session radix cache", () => {
  it("tags the nodes of a session named in the request body, and releases them on close", async () => {
    const models = (await (await fetch(`${server.baseUrl}/v1/models`)).json()) as { data: { id: string }[] };
    const model = models.data[0].id;
    const messages = [{ role: "system", content: "You are an agent. ".repeat(40) }, { role: "user", content: "List the files in the current directory." }];
    const r = await post("/v1/chat/completions", { model, messages, max_tokens: 4, temperature: 0, session_id: "bench-session-a" });
    expect(r.status, r.text).toBe(200);
    expect((await post("/close_session", { session_id: "bench-session-a" })).status).toBe(200);
    expect(await releasedLeaves("bench-session-a")).toBeGreaterThan(0);
    // Control: a session that sent nothing had nothing tagged.
    expect((await post("/close_session", { session_id: "bench-session-none" })).status).toBe(200);
    expect(await releasedLeaves("bench-session-none")).toBe(0);
  });
});
