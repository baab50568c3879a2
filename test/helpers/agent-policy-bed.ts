// The test bed of the agent policy's HTTP tests (gateway-auth.test.ts, policy-http.test.ts): a real
// nats-server with JetStream, and two stand-ins. The worker's HTTP surface is a tiny node:http
// server whose "tokenizer" is the character codes of the messages' JSON (so the gateway's token
// positions are checkable) and that records the path and credentials of every call; the worker's
// control plane is ReferenceResponder, the package's in-memory stand-in for the SGLang subscriber.
// The gateways and responders a test starts are closed after it.
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, afterEach, beforeAll } from "vitest";
import type { Gateway } from "../../src/app/gateway.js";
import type { GatewayConfigInput } from "../../src/gateway/index.js";
import { blockHashes } from "../../src/hash/index.js";
import { ReferenceResponder } from "../../src/testing/index.js";
import { startNatsServer, type NatsServer } from "./nats-server.js";
import { readJsonBody, sendJson } from "./stand-in-http.js";

export const PAGE = 4;
export const tokensOf = (messages: unknown): number[] =>
  [...JSON.stringify(messages)].map((c) => c.charCodeAt(0));
/** Every chat answer's response token ids. */
export const RESPONSE_TOKENS = [7, 7, 7, 7];

export interface Upstream {
  url: string;
  server: Server;
  /** Every call: path and the Authorization / x-api-key it came with. */
  calls: { path: string; auth: string | undefined; xkey: string | undefined }[];
}

/** The worker's HTTP surface (see the file comment); a chat whose last message is "call a tool" gets a tool call. */
async function upstream(): Promise<Upstream> {
  const calls: Upstream["calls"] = [];
  const server = createServer(async (req, res) => {
    calls.push({
      path: req.url ?? "",
      auth: req.headers.authorization,
      xkey: req.headers["x-api-key"] as string | undefined,
    });
    const body = (await readJsonBody(req)) as {
      messages?: { content?: unknown }[];
      prompt?: unknown;
    };
    const json = (v: unknown, status = 200) => sendJson(res, status, v);
    if (req.url === "/health") return json({});
    if (req.url === "/server_info")
      return json({ page_size: PAGE, kv_events: null, kv_events_config: null });
    if (req.url === "/v1/models")
      return json({ object: "list", data: [{ id: "tiny", object: "model" }] });
    if (req.url === "/v1/tokenize")
      return json({
        tokens: tokensOf(body.messages ?? body.prompt),
        count: 0,
        max_model_len: 1 << 20,
      });
    if (req.url?.startsWith("/v1/loads")) return json({}, 404);
    // kvctl's Anthropic tokenize route, as a kvctl worker has it: the gateway probes it at start with an empty body.
    if (req.url === "/kvctl/v1/messages/tokenize" && !body.messages) return json({}, 400);
    const tool = body.messages?.[body.messages.length - 1]?.content === "call a tool";
    json({
      id: "c",
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: tool ? null : "ok",
            tool_calls: tool
              ? [{ id: "call_1", type: "function", function: { name: "search", arguments: "{}" } }]
              : undefined,
          },
          prompt_token_ids: tokensOf(body.messages),
          response_token_ids: RESPONSE_TOKENS,
          finish_reason: tool ? "tool_calls" : "stop",
        },
      ],
      usage: {
        prompt_tokens: 1,
        completion_tokens: RESPONSE_TOKENS.length,
        prompt_tokens_details: { cached_tokens: 0 },
      },
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, calls };
}

export interface AgentPolicyBed {
  nats: NatsServer;
  nc: NatsConnection;
  /** A scratch folder, removed after the file's tests. */
  dir: string;
  up: Upstream;
  /** Closed after each test. */
  gateways: Gateway[];
  /** Stopped after each test. */
  responders: ReferenceResponder[];
  /** A gateway config with the agent policy over this bed (one worker, w0; a fresh session bucket). */
  config(over?: Partial<GatewayConfigInput>): GatewayConfigInput;
  /** Worker w0's control plane, knowing the blocks of these prompts (with the chat's response tokens). */
  responder(pinBudgetBlocks: number, ...prompts: unknown[][]): Promise<ReferenceResponder>;
}

/** Registers the bed's hooks in the calling test file; its fields are set once its beforeAll has run. */
export function useAgentPolicyBed(name: string): AgentPolicyBed {
  const bed: AgentPolicyBed = {
    gateways: [],
    responders: [],
    // Set by beforeAll, before any test reads them.
    nats: null as unknown as NatsServer,
    nc: null as unknown as NatsConnection,
    dir: "",
    up: null as unknown as Upstream,
    config: (over = {}) => ({
      listen: { host: "127.0.0.1", port: 0 },
      workers: [{ id: "w0", url: bed.up.url }],
      nats: { url: bed.nats.url, opTimeoutMs: 2000 },
      health: { intervalMs: 60_000, timeoutMs: 2000, failures: 1 },
      sessions: { idleAfterSeconds: 0, bucket: `${name}${bed.gateways.length}${Date.now()}` },
      policy: "agent",
      ...over,
    }),
    async responder(pinBudgetBlocks, ...prompts) {
      const r = await ReferenceResponder.start(bed.nc, {
        workerId: "w0",
        pinBudgetBlocks,
        log: () => undefined,
        record: true,
      });
      for (const p of prompts)
        r.model.addPath(blockHashes([...tokensOf(p), ...RESPONSE_TOKENS], { pageSize: PAGE }));
      bed.responders.push(r);
      return r;
    },
  };
  beforeAll(async () => {
    bed.dir = mkdtempSync(join(tmpdir(), `kvctl-${name}-`));
    bed.nats = await startNatsServer(["-js", "-sd", join(bed.dir, "js")]);
    bed.nc = await connect({ servers: bed.nats.url });
    bed.up = await upstream();
  }, 60_000);
  afterEach(async () => {
    for (const g of bed.gateways.splice(0)) await g.close();
    for (const r of bed.responders.splice(0)) r.stop();
  });
  afterAll(async () => {
    bed.up?.server.close();
    await bed.nc?.close();
    await bed.nats?.stop();
    if (bed.dir) rmSync(bed.dir, { recursive: true, force: true });
  });
  return bed;
}
