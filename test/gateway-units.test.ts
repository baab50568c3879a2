// Gateway pieces that need no server: routing on a fake clock, session-id precedence, the config
// schema, the worker-scheme check and the token-field surgery on response bytes.
import { AdmissionGate } from "../src/gateway/admission.js";
import { describe, expect, it } from "vitest";
import {
  GatewayConfigError,
  parseGatewayConfig,
  parseWorkerFlag,
} from "../src/gateway/config/load.js";
import { chatFromMessages, pythonJsonDumps } from "../src/gateway/workers/messages-fallback.js";
import { contentTypeError, streamOf } from "../src/gateway/request/worker-rules.js";
import {
  routeRequest,
  type RoutingOptions,
  type WorkerState,
} from "../src/gateway/workers/router.js";
import { sessionIdOf } from "../src/gateway/request/session-id.js";
import { newSessionRecord } from "../src/gateway/sessions/holds/record.js";
import {
  type HoldEnv,
  prepareHold,
  releaseCommands,
  settleHold,
  syncLegacyFields,
} from "../src/gateway/sessions/holds/holds.js";
import type { PolicyCommand } from "../src/contract/policy.js";
import { sessionKey } from "../src/gateway/sessions/session-store.js";
import { tokenizeRequestFor, withTokenIds } from "../src/gateway/request/token-request.js";
import { stripTokenFields, turnResultOf, usageOf } from "../src/gateway/workers/token-truth.js";
import { schemeFromServerInfo, WorkerSchemeError } from "../src/gateway/workers/worker-scheme.js";
import { applyEvent, InMemoryKvIndex } from "../src/index/index.js";
import { blockStored } from "./helpers/kv-events.js";

const OPTS: RoutingOptions = {
  cacheThreshold: 0.3,
  balanceAbsThreshold: 4,
  balanceRelThreshold: 1.5,
  sessionAffinityTtlSeconds: 60,
  scoring: {},
};

function ws(...loads: number[]): WorkerState[] {
  return loads.map((l, i) => ({
    id: `w${i}`,
    inFlight: l,
    inFlightPromptTokens: 0,
    stale: false,
    pageSize: 4,
  }));
}

/** An index where worker `w` holds the first `n` of `hashes` on the GPU. */
function indexWith(holdings: Record<string, number>, hashes: bigint[]): InMemoryKvIndex {
  const idx = new InMemoryKvIndex();
  for (const [w, n] of Object.entries(holdings)) {
    if (n === 0) continue;
    applyEvent(
      idx,
      w,
      blockStored({
        blockHashes: hashes.slice(0, n),
        tokenIds: Array.from({ length: n * 4 }, (_, i) => i),
        blockSize: 4,
      }) as never,
    );
  }
  return idx;
}

describe("routeRequest", () => {
  const hashes = [11n, 12n, 13n, 14n, 15n, 16n, 17n, 18n, 19n, 20n];
  const first = () => 0;

  it("sends a prompt to the worker holding most of its blocks when the match rate clears the threshold", () => {
    const idx = indexWith({ w0: 1, w1: 8 }, hashes);
    const d = routeRequest(
      { workers: ws(0, 0), overlap: idx.overlap(hashes), session: null, nowMs: 0 },
      OPTS,
      first,
    );
    expect(d).toMatchObject({ worker: "w1", reason: "cache", matchRate: 0.8 });
    expect(d.overlap?.GPU).toBe(8);
  });

  it("below the cache threshold picks the least-loaded worker", () => {
    const idx = indexWith({ w0: 2 }, hashes);
    const d = routeRequest(
      { workers: ws(3, 1), overlap: idx.overlap(hashes), session: null, nowMs: 0 },
      OPTS,
      first,
    );
    expect(d).toMatchObject({ worker: "w1", reason: "load", matchRate: 0.2 });
  });

  it("load imbalance beyond both thresholds overrides cache and session", () => {
    const idx = indexWith({ w0: 10 }, hashes);
    const d = routeRequest(
      {
        workers: ws(10, 2),
        overlap: idx.overlap(hashes),
        session: { worker: "w0", lastActivityMs: 0 },
        nowMs: 1,
      },
      OPTS,
      first,
    );
    expect(d).toMatchObject({ worker: "w1", reason: "balance" });
    // Absolute gap 8 > 4 but 10 > 7 * 1.5 is false: no balance override.
    expect(
      routeRequest(
        { workers: ws(10, 7), overlap: idx.overlap(hashes), session: null, nowMs: 0 },
        OPTS,
        first,
      ).reason,
    ).toBe("cache");
  });

  it("session affinity is soft: it holds within its TTL on the fake clock and expires after", () => {
    const idx = indexWith({ w1: 10 }, hashes);
    const session = { worker: "w0", lastActivityMs: 1_000 };
    expect(
      routeRequest(
        { workers: ws(0, 0), overlap: idx.overlap(hashes), session, nowMs: 60_999 },
        OPTS,
        first,
      ),
    ).toMatchObject({ worker: "w0", reason: "session" });
    expect(
      routeRequest(
        { workers: ws(0, 0), overlap: idx.overlap(hashes), session, nowMs: 61_001 },
        OPTS,
        first,
      ),
    ).toMatchObject({ worker: "w1", reason: "cache" });
  });

  it("a session whose worker is drained re-routes and says so", () => {
    const d = routeRequest(
      {
        workers: ws(0).map((w) => ({ ...w, id: "w1" })),
        overlap: null,
        session: { worker: "w0", lastActivityMs: 0 },
        nowMs: 0,
      },
      OPTS,
      first,
    );
    expect(d).toMatchObject({ worker: "w1", sessionMoved: true });
  });

  it("a stale worker's index view is not trusted", () => {
    const idx = indexWith({ w0: 10 }, hashes);
    const workers = ws(0, 0);
    workers[0].stale = true;
    const d = routeRequest(
      { workers, overlap: idx.overlap(hashes), session: null, nowMs: 0 },
      OPTS,
      () => 0.99,
    );
    expect(d.overlap).toEqual({ GPU: 0, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 });
    expect(d.reason).toBe("load");
  });

  it("host-tier blocks count with the host weight (tier-aware scorer)", () => {
    const idx = indexWith({ w0: 4 }, hashes);
    applyEvent(
      idx,
      "w1",
      blockStored({
        blockHashes: hashes.slice(0, 8),
        tokenIds: Array.from({ length: 32 }, (_, i) => i),
        blockSize: 4,
        medium: "CPU_PINNED",
        tier: "CPU_PINNED",
      }) as never,
    );
    // w0: credit 4 (device); w1: 0.75 * 8 = 6 (host) -> w1 has the lower logit.
    expect(
      routeRequest(
        { workers: ws(0, 0), overlap: idx.overlap(hashes), session: null, nowMs: 0 },
        OPTS,
        first,
      ).worker,
    ).toBe("w1");
  });

  it("refuses to route with no worker", () => {
    expect(() =>
      routeRequest({ workers: [], overlap: null, session: null, nowMs: 0 }, OPTS),
    ).toThrow(/no worker is taking traffic/);
  });
});

describe("sessionIdOf", () => {
  const body = { session_id: "sg", prompt_cache_key: "oa", metadata: { user_id: "an" } };
  it("takes headers in order, then body fields in order", () => {
    const h = {
      "x-session-id": "a",
      "x-dynamo-session-id": "b",
      "x-claude-code-session-id": "c",
      "session-id": "d",
    };
    expect(sessionIdOf(h, body)).toEqual({ id: "a", from: "header x-session-id" });
    expect(sessionIdOf({ ...h, "x-session-id": undefined }, body)?.id).toBe("b");
    expect(sessionIdOf({ "x-claude-code-session-id": "c", "session-id": "d" }, body)?.id).toBe("c");
    expect(sessionIdOf({ "session-id": "d" }, body)?.id).toBe("d");
    expect(sessionIdOf({}, body)).toEqual({ id: "sg", from: "session_id" });
    expect(sessionIdOf({}, { prompt_cache_key: "oa", metadata: { user_id: "an" } })?.id).toBe("oa");
    expect(sessionIdOf({}, { metadata: { user_id: "an" } })).toEqual({
      id: "an",
      from: "metadata.user_id",
    });
    expect(sessionIdOf({}, { messages: [] })).toBeNull();
  });
  it("rejects a non-string body field, naming it", () => {
    expect(() => sessionIdOf({}, { prompt_cache_key: 5 })).toThrow(
      /prompt_cache_key must be a string/,
    );
    expect(() => sessionIdOf({ "x-session-id": "x".repeat(600) }, null)).toThrow(
      /header x-session-id is longer/,
    );
  });
  it("maps any id to a valid KV key", () => {
    expect(sessionKey("user 1/ä.*>")).toMatch(/^s\.[A-Za-z0-9_-]+$/);
    expect(sessionKey("x".repeat(300))).toMatch(/^h\.[0-9a-f]{64}$/);
  });
});

describe("gateway config", () => {
  it("fills defaults and names bad fields by path", () => {
    const c = parseGatewayConfig({ workers: [{ id: "w0", url: "http://127.0.0.1:30000" }] });
    expect(c.routing.cacheThreshold).toBe(0.3);
    expect(c.limits.bodyLimitBytes).toBe(16 * 1024 * 1024);
    expect(() =>
      parseGatewayConfig({
        workers: [{ id: "w 0", url: "ftp://x" }],
        routing: { cacheTreshold: 1 },
      }),
    ).toThrow(
      /workers\.0\.id: must be 1-128[\s\S]*workers\.0\.url: must be http[\s\S]*routing: Unrecognized key: "cacheTreshold"/,
    );
    expect(() => parseGatewayConfig({ workers: [] })).toThrow(/workers: needs at least one worker/);
    expect(() =>
      parseGatewayConfig({
        workers: [
          { id: "a", url: "http://h:1" },
          { id: "a", url: "http://h:2" },
        ],
      }),
    ).toThrow(GatewayConfigError);
  });
  it("parses --worker specs", () => {
    expect(parseWorkerFlag("w0=http://h:1,events=tcp://h:5557,replay=tcp://h:5558")).toEqual({
      id: "w0",
      url: "http://h:1",
      events: "tcp://h:5557",
      replay: "tcp://h:5558",
    });
    expect(() => parseWorkerFlag("w0=http://h:1,evnts=tcp://h:1")).toThrow(/unknown key 'evnts'/);
  });
});

describe("worker scheme from /server_info", () => {
  const info = {
    page_size: 16,
    kv_events: {
      publisher: "zmq",
      endpoint_host: "*",
      endpoint_port_base: 5557,
      topic: "",
      block_size: 16,
      dp_size: 1,
      replay_endpoint_port_base: 5558,
    },
    kv_events_config: '{"publisher":"zmq","endpoint":"tcp://*:5557"}',
  };
  it("reads page size, format and endpoints (wildcard host -> the worker URL's host)", () => {
    const ad = schemeFromServerInfo("w0", "http://10.0.0.5:30000", info);
    expect(ad.scheme).toEqual({ pageSize: 16, eventFormat: "sglang", bigram: false });
    expect(ad.events).toBe("tcp://10.0.0.5:5557");
    expect(ad.replay).toBe("tcp://10.0.0.5:5558");
  });
  it("refuses a worker whose hashes it cannot reproduce", () => {
    expect(() => schemeFromServerInfo("w0", "http://h:1", { ...info, enable_lora: true })).toThrow(
      WorkerSchemeError,
    );
    expect(() => schemeFromServerInfo("w0", "http://h:1", { page_size: null })).toThrow(
      /no usable page size/,
    );
    expect(() =>
      schemeFromServerInfo("w0", "http://h:1", { ...info, kv_events_config: '{"format":"weird"}' }),
    ).toThrow(/format 'weird'/);
  });
});

describe("token ids from the worker", () => {
  it("asks for token ids after the client's own keys and cuts only what it added", () => {
    const raw = Buffer.from('{"messages":[],"return_token_ids":false}');
    const { raw: out, added } = withTokenIds("chat", raw, JSON.parse(raw.toString()));
    expect(out.toString()).toBe('{"messages":[],"return_token_ids":false,"return_token_ids":true}');
    const resp =
      '{"id":"x","choices":[{"index":0,"message":{"content":"a,\\"prompt_token_ids\\":[1]"},"prompt_token_ids":[1,2,3],"response_token_ids":[4,5],"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}';
    expect(stripTokenFields(resp, added)).toBe(
      '{"id":"x","choices":[{"index":0,"message":{"content":"a,\\"prompt_token_ids\\":[1]"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}',
    );
    const r = turnResultOf("chat", JSON.parse(resp));
    expect(r).toMatchObject({
      promptTokens: [1, 2, 3],
      outputTokens: [4, 5],
      finishReason: "stop",
    });
  });
  it("keeps fields the client asked for", () => {
    const body = { return_prompt_token_ids: true };
    const { added } = withTokenIds("chat", Buffer.from(JSON.stringify(body)), body);
    expect(added).toMatchObject({ prompt: false, response: true });
    expect(stripTokenFields('{"prompt_token_ids":[1],"response_token_ids":[2]}', added)).toBe(
      '{"prompt_token_ids":[1]}',
    );
  });
  it("reads Anthropic usage: the prompt is input_tokens plus what the cache read or wrote", () => {
    expect(usageOf({ input_tokens: 5, cache_read_input_tokens: 32, output_tokens: 4 })).toEqual({
      promptTokens: 37,
      completionTokens: 4,
      cachedTokens: 32,
    });
    expect(usageOf({ input_tokens: 5, output_tokens: 4 })).toEqual({
      promptTokens: 5,
      completionTokens: 4,
      cachedTokens: null,
    });
    expect(
      usageOf({
        prompt_tokens: 9,
        completion_tokens: 1,
        prompt_tokens_details: { cached_tokens: 8 },
      }),
    ).toEqual({ promptTokens: 9, completionTokens: 1, cachedTokens: 8 });
  });
  it("tokenizes Anthropic messages through the worker's own conversion, the rest through /v1/tokenize", () => {
    const m = tokenizeRequestFor("messages", {
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
      stream: true,
    });
    expect(m).toEqual({
      path: "/kvctl/v1/messages/tokenize",
      body: { messages: [{ role: "user", content: "hi" }], max_tokens: 4 },
    });
    expect(tokenizeRequestFor("chat", { messages: [], model: "m" })).toEqual({
      path: "/v1/tokenize",
      body: { messages: [], model: "m" },
    });
    expect(tokenizeRequestFor("messages", { prompt: "x" })).toBeNull();
  });
});

describe("the worker's request rules", () => {
  it("reads stream as the worker does: lax booleans on the OpenAI and Anthropic routes, JSON booleans on /generate", () => {
    for (const v of [true, "true", "YES", "on", "t", "y", 1, "1"])
      expect(streamOf("chat", v)).toBe(true);
    for (const v of [false, undefined, "false", "No", "off", 0, "0"])
      expect(streamOf("completions", v)).toBe(false);
    for (const v of [2, "maybe", " true", [], {}, 0.5]) expect(streamOf("chat", v)).toBeNull();
    expect(streamOf("chat", null)).toBeNull();
    expect(streamOf("messages", null)).toBe(false);
    expect(streamOf("generate", true)).toBe(true);
    for (const v of ["true", 1, null]) expect(streamOf("generate", v)).toBeNull();
  });

  it("takes exactly application/json on the OpenAI and Anthropic routes, any JSON media type on /generate", () => {
    for (const ct of ["application/json", "Application/JSON", "application/json; charset=utf-8"])
      expect(contentTypeError("chat", ct)).toBeNull();
    for (const ct of [undefined, "text/plain", "application/json ; x=1", "application/vnd.x+json"])
      expect(contentTypeError("messages", ct)).toMatch(/^Unsupported Media Type/);
    for (const ct of ["application/json", "application/vnd.x+json", "application/json ; x=1"])
      expect(contentTypeError("generate", ct)).toBeNull();
    for (const ct of [undefined, "text/plain", "text/json"])
      expect(contentTypeError("generate", ct)).toMatch(/^Unsupported Media Type/);
  });
});

describe("Anthropic messages rendered as chat (a worker without kvctl's tokenize route)", () => {
  it("renders system, text, tool_use and tool_result as SGLang's conversion does", () => {
    const chat = chatFromMessages({
      model: "m",
      system: [
        { type: "text", text: "Be brief." },
        { type: "text", text: "" },
      ],
      tools: [{ name: "get_weather", description: "d", input_schema: { type: "object" } }],
      messages: [
        { role: "user", content: [{ type: "text", text: "Weather?" }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Checking." },
            { type: "tool_use", id: "t1", name: "get_weather", input: { city: "Paris" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "before" },
            { type: "tool_result", tool_use_id: "t1", content: "sunny" },
            { type: "text", text: "after" },
          ],
        },
      ],
    });
    expect(chat).toEqual({
      model: "m",
      tools: [
        {
          type: "function",
          function: { name: "get_weather", description: "d", parameters: { type: "object" } },
        },
      ],
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          content: "Checking.",
          tool_calls: [
            {
              id: "t1",
              type: "function",
              function: { name: "get_weather", arguments: '{"city": "Paris"}' },
            },
          ],
        },
        { role: "user", content: "before" },
        { role: "tool", tool_call_id: "t1", content: "sunny" },
        { role: "user", content: "after" },
      ],
    });
  });

  it("writes tool arguments as Python's json.dumps does", () => {
    expect(pythonJsonDumps({ a: [1, "é", { b: null }], c: true })).toBe(
      '{"a": [1, "\\u00e9", {"b": null}], "c": true}',
    );
  });

  it("gives up on blocks it does not render (images, thinking)", () => {
    expect(
      chatFromMessages({ messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }),
    ).toBeNull();
    expect(
      chatFromMessages({
        messages: [{ role: "assistant", content: [{ type: "thinking", thinking: "hm" }] }],
      }),
    ).toBeNull();
  });
});

describe("session record", () => {
  it("names leases and pins as holds; a revoke that failed keeps the lease in doubt, sent again and acked it goes", () => {
    const r = newSessionRecord("s", 0);
    let n = 0;
    const env = (now: number): HoldEnv => ({
      replica: "r1",
      now,
      nextId: () => `h${++n}`,
      incarnation: () => null,
    });
    const run = (pc: PolicyCommand, status: string, now: number) => {
      const { effect } = prepareHold(r, pc, env(now));
      settleHold(r, effect, { status }, now);
      syncLegacyFields(r);
    };
    run(
      {
        worker: "w0",
        reason: "t",
        sessionId: "s",
        command: { type: "Pause", block_hashes: [5n], ttl_seconds: 30, lease_id: "L1" },
      },
      "applied",
      10,
    );
    expect(r.leases).toEqual([
      {
        worker: "w0",
        incarnation: null,
        leaseId: "L1",
        blockHashes: ["5"],
        ttlSeconds: 30,
        atMs: 10,
      },
    ]);
    run(
      {
        worker: "w0",
        reason: "t",
        sessionId: "s",
        command: { type: "RevokeLease", lease_id: "L1" },
      },
      "failed",
      11,
    );
    expect(r.holds?.filter((h) => h.kind === "lease" && h.state === "doubt")).toHaveLength(1);
    // Close sends the revoke in doubt again, under its id.
    const [again] = releaseCommands(
      r,
      env(12),
      () => true,
      "close",
      (e) => e.doubt,
    );
    expect(again.pc.command).toEqual({ type: "RevokeLease", lease_id: "L1" });
    settleHold(r, again.effect, { status: "applied" }, 12);
    syncLegacyFields(r);
    expect(r.holds?.filter((h) => h.kind === "lease")).toHaveLength(0);
    expect(r.leases).toHaveLength(0);
    run(
      {
        worker: "w0",
        reason: "t",
        sessionId: "s",
        command: { type: "Cache", block_hashes: [7n], pin: true, ttl_seconds: null },
      },
      "applied",
      13,
    );
    expect(r.pins).toHaveLength(1);
    // A release that leaves the blocks to the worker's eviction goes out again as one.
    run(
      {
        worker: "w0",
        reason: "t",
        sessionId: "s",
        command: { type: "Pause", block_hashes: [9n], ttl_seconds: 30, lease_id: "L2" },
      },
      "applied",
      14,
    );
    run(
      {
        worker: "w0",
        reason: "t",
        sessionId: "s",
        command: { type: "RevokeLease", lease_id: "L2", purge: false },
      },
      "failed",
      15,
    );
    const [kept] = releaseCommands(
      r,
      env(16),
      () => true,
      "close",
      (e) => e.doubt,
    );
    expect(kept.pc.command).toEqual({ type: "RevokeLease", lease_id: "L2", purge: false });
  });
});

describe("admission gate", () => {
  it("admits within the token limit in arrival order; a request larger than the limit runs alone; a waiter that leaves frees its place", async () => {
    const gate = new AdmissionGate({ maxPromptTokens: 100 });
    const order: string[] = [];
    const enter = (name: string, tokens: number) => {
      const t = gate.enter(tokens);
      void t.ready.then(() => order.push(name));
      return t;
    };
    const a = enter("a", 60);
    const b = enter("b", 50); // 60 + 50 > 100: waits
    const c = enter("c", 10); // would fit, but b came first
    const big = enter("big", 500);
    const d = enter("d", 10);
    await Promise.resolve();
    expect([a.queued, b.queued, c.queued, big.queued, d.queued]).toEqual([
      false,
      true,
      true,
      true,
      true,
    ]);
    expect(order).toEqual(["a"]);
    a.release();
    await Promise.resolve();
    expect(order).toEqual(["a", "b", "c"]);
    expect([gate.running, gate.runningTokens, gate.waiting]).toEqual([2, 60, 2]);
    d.release(); // its client left while waiting
    b.release();
    c.release();
    await Promise.resolve();
    expect(order).toEqual(["a", "b", "c", "big"]);
    expect([gate.running, gate.runningTokens, gate.waiting]).toEqual([1, 500, 0]);
    big.release();
    big.release(); // once only
    expect([gate.running, gate.runningTokens]).toEqual([0, 0]);
  });

  it("limits requests at once; is off without a limit", () => {
    const gate = new AdmissionGate({ maxRequests: 2 });
    expect([gate.enter(1).queued, gate.enter(1).queued, gate.enter(1).queued]).toEqual([
      false,
      false,
      true,
    ]);
    expect(AdmissionGate.enabled({})).toBe(false);
    expect(AdmissionGate.enabled(undefined)).toBe(false);
    expect(AdmissionGate.enabled({ maxRequests: 4 })).toBe(true);
  });
});
