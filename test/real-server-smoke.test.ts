// The real-server fixture itself: a patched SGLang server on CPU starts, its kvctl subscriber
// listens, and it serves greedy requests with prefix-cache hits that SGLang reports.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { generate, type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

let nats: NatsServer;
let server: SglangServer;

beforeAll(async () => {
  nats = await startNatsServer();
  server = await startSglangServer({ natsUrl: nats.url, workerId: "smoke0" });
}, 300_000);

afterAll(async () => {
  await server?.stop();
  await nats?.stop();
}, 120_000);

describe("real SGLang server fixture", () => {
  it("reports what it started", () => {
    expect(server.info.server).toBe("sglang 0.5.23");
    expect(server.info.worker_id).toBe("smoke0");
    expect(server.info.events_endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect(server.info.command).toContain("--kv-control-nats-url");
  });

  it("serves greedy requests and reports the prefix hit of the second one", async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => 100 + i);
    const a = await generate(server.baseUrl, prompt, 6);
    const b = await generate(server.baseUrl, prompt, 6);
    expect(a.meta_info.prompt_tokens).toBe(40);
    expect(b.output_ids).toEqual(a.output_ids);
    expect(b.meta_info.cached_tokens).toBe(32); // whole pages of 16 below the last token
    expect(b.meta_info.cached_tokens_details?.device).toBe(32);
  });
});
