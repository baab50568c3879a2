// bench:agent's shared workers: configurations with the same server flags, no subscriber and no
// L3 run one after another on the same workers, emptied by SGLang's own /flush_cache. A real
// patched SGLang server on CPU (no L3, a device pool of 4096 tokens, host tier at ratio 2) serves a
// prompt until it is backed up to the host tier, then fillers push it off the device: it is still
// served from cache, from the host tier.
// Handed back and taken again under the same key, the worker is the same process, and the prompt
// is now computed in full: the flush emptied the host tier as well as the device.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentModel } from "../bench/agent/stack.js";
import { WorkerPool } from "../bench/agent/worker-pool.js";
import { type RealServer, startRealServer } from "../src/demo/real-server.js";

let server: RealServer;
let model = "";

beforeAll(async () => {
  server = await startRealServer({
    model: agentModel(),
    workerId: "pool0",
    pageSize: 16,
    maxTotalTokens: 4096,
    hostRatio: 2,
    storageDir: "",
    warmup: false,
    extraArgs: ["--enable-cache-report", "--context-length", "32768"],
    readyTimeoutS: 600,
  });
  model = (
    (await (await fetch(`${server.baseUrl}/v1/models`)).json()) as { data: { id: string }[] }
  ).data[0].id;
}, 900_000);

afterAll(async () => {
  await server?.stop();
});

interface Served {
  cached: number;
  host: number;
  raw: string;
}

/** One prompt of about 1,500 tokens (`tag` makes it unique), one token out. */
async function ask(tag: string): Promise<Served> {
  const content = `${tag} ${"rows of data the tool returned ".repeat(60)}`;
  const r = await fetch(`${server.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content }],
      max_tokens: 1,
      temperature: 0,
      return_cached_tokens_details: true,
    }),
  });
  const j = (await r.json()) as {
    usage?: { prompt_tokens_details?: { cached_tokens?: number } | null };
    sglext?: { cached_tokens_details?: { host?: number } };
  };
  expect(r.status, JSON.stringify(j).slice(0, 300)).toBe(200);
  return {
    cached: j.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    host: j.sglext?.cached_tokens_details?.host ?? 0,
    raw: JSON.stringify({ usage: j.usage, sglext: j.sglext }),
  };
}

describe("bench:agent worker pool", () => {
  it("hands the same workers to the next configuration of its key, emptied of device and host cache", {
    timeout: 600_000,
  }, async () => {
    // Served three times: SGLang's default write policy (write_through_selective) backs a prefix up
    // to the host tier once it has been hit twice.
    for (let i = 0; i < 3; i++) await ask("alpha");
    for (const f of ["f1", "f2", "f3"]) await ask(f);
    const before = await ask("alpha");
    expect(before.cached, before.raw).toBeGreaterThan(0);
    expect(before.host, before.raw).toBeGreaterThan(0);
    for (const f of ["f4", "f5", "f6"]) await ask(f);
    const pool = new WorkerPool(() => undefined);
    await pool.give("", [server], true);
    const { workers, reused } = await pool.take("", () =>
      Promise.reject(new Error("a fresh start was not expected")),
    );
    expect(reused).toBe(true);
    expect(workers[0]).toBe(server);
    const after = await ask("alpha");
    expect({ cached: after.cached, host: after.host }, after.raw).toEqual({ cached: 0, host: 0 });
  });
});
