// One tokenizer per worker process: what the gateway learns from a worker's tokenizer (a system
// prompt's length under its chat template) is kept by that process's Tokenizer and goes when the
// worker is found running a new one. The worker's tokenize route is a node:http stand-in here (a
// real SGLang server cannot be restarted with another template within a test), counting the calls
// it answers; the real route is exercised by the real-server gateway tests.
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../src/gateway/config/load.js";
import { tokenizeCall } from "../src/gateway/request/tokenize-call.js";
import { GatewayWorker, tokenizeTimeoutMs } from "../src/gateway/workers/worker.js";

/** The worker's /v1/tokenize: the system text's length in tokens, then `extra` template tokens. */
const worker = { calls: 0, extra: 0 };
let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => {
      body += c;
    });
    req.on("end", () => {
      worker.calls++;
      const n = (JSON.parse(body) as { prompt?: string }).prompt?.split(" ").length ?? 0;
      const tokens = Array.from({ length: n + worker.extra }, (_, i) => i + 1);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ tokens, count: tokens.length }));
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server?.close();
});

describe("a worker's tokenizer", () => {
  it("remembers a system prompt's length for its process only: a restarted worker is asked again", async () => {
    const cfg = parseGatewayConfig(
      { workers: [{ id: "w0", url }], health: { timeoutMs: 2000 } },
      "test config",
    );
    const w = new GatewayWorker(cfg.workers[0], cfg);
    expect(w.tokenizer.timeoutMs).toBe(tokenizeTimeoutMs(cfg));
    const system = tokenizeCall({ prompt: "a b c", add_special_tokens: false });
    const prompt = Array.from({ length: 10 }, (_, i) => i + 1);
    worker.calls = 0;
    expect(await w.tokenizer.systemLength(system, prompt)).toBe(3);
    expect(await w.tokenizer.systemLength(system, prompt)).toBe(3);
    expect(worker.calls).toBe(1);
    // A new process, with a template that adds two tokens to the system message.
    worker.extra = 2;
    expect(await w.tokenizer.systemLength(system, prompt)).toBe(3);
    w.newProcess();
    expect(await w.tokenizer.systemLength(system, prompt)).toBe(5);
    expect(worker.calls).toBe(2);
    // Tokens that are no prefix of the prompt give no length (and are remembered as such).
    expect(await w.tokenizer.systemLength(system, [9, 9, 9, 9, 9, 9])).toBe(5);
    const other = tokenizeCall({ prompt: "x y", add_special_tokens: false });
    expect(await w.tokenizer.systemLength(other, [9, 9, 9, 9, 9, 9])).toBeNull();
    expect(await w.tokenizer.textLength("one two three four")).toBe(6);
    await w.pool.destroy();
  });
});
