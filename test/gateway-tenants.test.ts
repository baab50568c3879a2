// Tenants are walls: two tenants, A and B, each with its own key, on one gateway in front of a real
// patched SGLang server on CPU and a real nats-server. Neither may read, cancel, evict or outlive-
// pin the other's data, and a tenant's own caps cost it only what is new.
//
// The cross-tenant matrix (B acts on what A made; "same as unknown": status and body equal to the
// answer for an id nobody used).
//  #  | object            | B's action                                  | expected
//  1  | stored response   | GET /v1/responses/{A's id}                  | 404, same as unknown
//  2  | stored response   | POST /v1/responses/{A's id}/cancel          | 404, same as unknown
//  3  | stored response   | POST /v1/responses previous_response_id=A's | 404, same as unknown
//  4  | stored response   | A's GET after B's cancel and reads          | 200, A's text intact
//  5  | stored response   | A's own GET, cancel                         | served by the worker that holds it
//  6  | stored response   | GET with the admin key                      | 200 (admin sees all)
//  7  | pins              | A's session at its cap refreshes, 100 turns | every refresh sent, none dropped
//  8  | pins              | B's session at its cap beside A's           | B's refreshes sent; A's cap unmoved
//  9  | pins              | policy view after the run                   | equals the worker's Inspect
// 10  | hints route       | duplicate JSON keys                         | 400 naming the key, nothing applied
// 11  | A's sessionless   | B's session with A's prefix closes (prune)  | A's cached_tokens unchanged
// 12  | A's session on    | B's session closes on r1 (prune), r1 never  | A's cached_tokens unchanged
//     |   replica r2      |   saw a turn of A's                         |
// 13-34 (test/evict-guard.test.ts, one row per case): B's Prune, Think (purge and transient),
//     Pause and ToolStart (demote) and RevokeLease (purge) over blocks A's sessions or sessionless
//     requests use go out cut to B's own blocks, without the purge, or not at all; unchanged once
//     A's use ended.
// 35  | A's prompt        | B sends it (salted, the default for 2+      | cached_tokens equal to a prompt
//     |   (salted)        |   tenants)                                  |   nobody sent
// 36  | A's namespace     | B sends A's prompt with cache_salt naming   | the same: B's salt stays B's
//     |                   |   A's namespace                             |
// 37  | A's prompt        | A's own reuse after B's guesses             | whole (>= before)
// 38  | salted hashing    | A's session chain against the worker        | every block held (one namespace)
// 39  | /v1/messages      | a salted tenant's request                   | 400 saying why, not unsalted
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import type { Observation } from "../src/contract/observations.js";
import type { GatewayPolicy, PolicyCommand } from "../src/contract/policy.js";
import { ControlPublisher } from "../src/control/publisher.js";
import { hashKey } from "../src/gateway/auth/keys.js";
import { type AgentPolicy, agentPolicy, createAgentPolicy } from "../src/policy/agent-policy.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { recordWhen, until } from "./helpers/poll.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

const KEY_A = "tenant-a-key-0123456789";
const KEY_B = "tenant-b-key-9876543210";
const ADMIN = "admin-key-0123456789abc";
const CAP = 3;
const TURNS = 100;

const PINS_ONLY = {
  pins: { enabled: true, refreshBelow: 1 },
  inflight: { enabled: false },
  tools: { enabled: false },
  think: { enabled: false },
  idle: { enabled: false },
  prune: { enabled: false },
  warm: { enabled: false },
};

const SYSTEM_TEXT =
  "You are a careful agent. Think before acting, and keep every answer short. ".repeat(12);

let nats: NatsServer;
let jsDir: string;
let server: SglangServer;
let nc: NatsConnection;
let g: Gateway;
let policy: AgentPolicy;

/** A gateway's config on this file's worker and NATS, its sessions in `bucket`, no periodic
 * Inspect and no health probe during a test. */
const bed = (bucket: string) => ({
  listen: { host: "127.0.0.1", port: 0 },
  workers: [{ id: "w0", url: server.baseUrl }],
  nats: { url: nats.url, opTimeoutMs: 5000 },
  sessions: { bucket, idleAfterSeconds: 0, inspectMs: 0 },
  health: { intervalMs: 60_000, timeoutMs: 15_000, failures: 3 },
});
const emitted: PolicyCommand[] = [];

beforeAll(async () => {
  jsDir = mkdtempSync(join(tmpdir(), "kvctl-tenants-"));
  nats = await startNatsServer(["-js", "-sd", jsDir]);
  nc = await connect({ servers: nats.url });
  server = await startSglangServer({
    natsUrl: nats.url,
    workerId: "w0",
    storageDir: "",
    maxTotalTokens: 2048,
    hostRatio: 2,
    readyTimeoutS: 540,
    extraArgs: ["--enable-cache-report", "--enable-response-store"],
  });
  g = await createGateway({
    config: {
      // No periodic Inspect (bed's inspectMs 0): only the acks may bring the view to what the
      // worker holds.
      ...bed("tenants"),
      auth: {
        admin: { keys: [hashKey(ADMIN)] },
        tenants: [
          // One cache for both: their sessions pin the same system prompt's blocks.
          {
            id: "a",
            keys: [hashKey(KEY_A)],
            maxPinnedBlocksPerSession: CAP,
            cacheIsolation: "shared",
          },
          {
            id: "b",
            keys: [hashKey(KEY_B)],
            maxPinnedBlocksPerSession: CAP,
            cacheIsolation: "shared",
          },
        ],
      },
      policies: PINS_ONLY,
      jsonLog: true,
    },
    // The agent policy as the gateway runs it (the tenants' caps applied before it pins), kept
    // in hand to compare its view with the worker's.
    policy: (env): GatewayPolicy => {
      policy = createAgentPolicy({
        config: env.config,
        registry: env.registry,
        log: env.log,
        decisionLog: env.decisionLog,
        tenantCaps: env.tenantCaps,
      });
      return {
        name: policy.name,
        observe(o: Observation) {
          const out = policy.observe(o);
          emitted.push(...out);
          return out;
        },
      };
    },
    decisionLog: () => undefined,
    log: () => undefined,
  });
}, 600_000);

afterAll(async () => {
  await g?.close().catch(() => undefined);
  await nc?.close();
  await server?.stop();
  await nats?.stop();
  if (jsDir) rmSync(jsDir, { recursive: true, force: true });
}, 120_000);

const headers = (key: string, extra: Record<string, string> = {}) => ({
  "content-type": "application/json",
  authorization: `Bearer ${key}`,
  ...extra,
});

async function turn(key: string, session: string, n: number): Promise<void> {
  const res = await fetch(`${g.url}/v1/chat/completions`, {
    method: "POST",
    headers: headers(key, { "x-session-id": session }),
    body: JSON.stringify({
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: SYSTEM_TEXT, cache_control: { type: "ephemeral", ttl: "1h" } },
          ],
        },
        { role: "user", content: `Turn ${n}.` },
      ],
      max_tokens: 1,
      temperature: 0,
    }),
  });
  expect(res.status).toBe(200);
  await res.text();
}

/** A chat turn's cached_tokens (the worker's prompt-cache report). */
async function ask(
  gw: Gateway,
  key: string,
  system: string,
  user: string,
  session?: string,
  extra: Record<string, unknown> = {},
): Promise<number> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: headers(key, session ? { "x-session-id": session } : {}),
    body: JSON.stringify({
      messages: [
        { role: "system", content: system },
        { role: "user", content: user },
      ],
      max_tokens: 4,
      temperature: 0,
      ...extra,
    }),
  });
  const body = (await res.json()) as {
    usage?: { prompt_tokens_details?: { cached_tokens?: number } };
  };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body.usage?.prompt_tokens_details?.cached_tokens ?? 0;
}

/** A system prompt of its own per case (about 770 tokens), so no other case's blocks reach it. */
const systemOf = (tag: string) =>
  `Case ${tag}. You answer questions about the weather, briefly and politely. `.repeat(14);

const metricLines = async (prefix: string) =>
  (await g.metrics.registry.metrics()).split("\n").filter((l) => l.startsWith(prefix));

describe("caps count what is new", () => {
  it(`two tenants' sessions at their caps keep every refresh for ${TURNS} turns; the policy's view equals the worker's Inspect`, async () => {
    for (let i = 0; i < TURNS; i++) {
      await turn(KEY_A, "s", i);
      await turn(KEY_B, "s", i);
    }
    // After the turns' after-work settles: a turn's pin may be emitted after its answer returned.
    await g.settled();
    const pins = emitted.filter((c) => c.command.type === "Cache" && c.command.pin);
    // Hits re-pin the held blocks (refreshBelow: 1): the session at its cap refreshes.
    for (const s of ["a/s", "b/s"])
      expect(pins.filter((c) => c.sessionId === s).length).toBeGreaterThan(1);
    for (const c of pins)
      expect(c.command.type === "Cache" && c.command.block_hashes.length).toBe(CAP);
    expect(await metricLines("kvctl_gateway_pin_cap_total{")).toEqual([]);
    // Each session's own last pin (a turn's pin may be emitted after the other tenant's next
    // turn began, so the two sessions' pins interleave in no fixed order).
    const lastPin = (s: string) => pins.filter((c) => c.sessionId === s).at(-1)?.id;
    const rec = await recordWhen(g, "a/s", (r) =>
      r.commands.some((c) => c.id === lastPin("a/s") && c.state === "applied"),
    );
    await recordWhen(g, "b/s", (r) =>
      r.commands.some((c) => c.id === lastPin("b/s") && c.state === "applied"),
    );
    expect(await metricLines('kvctl_policy_acks_total{policy="cache_markers"')).toEqual([
      `kvctl_policy_acks_total{policy="cache_markers",type="Cache",status="applied"} ${pins.length}`,
    ]);
    const chain = rec.chain.map((h) => BigInt(h));
    const pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 0 });
    const inspect = (await pub.send("w0", { type: "Inspect", block_hashes: chain })) as {
      detail?: { blocks?: { block_hash: number | bigint; pin_count: number }[] };
    };
    pub.close();
    const onWorker = new Map(
      (inspect.detail?.blocks ?? []).map((b) => [BigInt(b.block_hash), b.pin_count]),
    );
    const inView = (h: bigint) =>
      policy.state.budget.holdsAt("w0", h).filter((x) => x.kind !== "lease").length;
    expect(chain.map((h) => [String(h), inView(h)])).toEqual(
      chain.map((h) => [String(h), onWorker.get(h) ?? 0]),
    );
    // Both sessions hold the same CAP blocks (one system prompt; each refresh is a pin of its
    // own, released layer by layer): the cap's blocks are pinned, none past them.
    expect(chain.slice(0, CAP).every((h) => (onWorker.get(h) ?? 0) >= 2)).toBe(true);
    expect(chain.slice(CAP).some((h) => (onWorker.get(h) ?? 0) > 0)).toBe(false);
    expect(policy.state.budget.used("w0")).toBe(CAP);
  }, 600_000);
});

describe("stored responses have an owner", () => {
  const post = (key: string, path: string, body?: unknown) =>
    fetch(`${g.url}${path}`, {
      method: "POST",
      headers: headers(key),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const get = (key: string, path: string) => fetch(`${g.url}${path}`, { headers: headers(key) });
  const answer = async (res: Response) => ({ status: res.status, body: await res.json() });
  let model: string;

  beforeAll(async () => {
    const res = await get(KEY_A, "/v1/models");
    model = ((await res.json()) as { data: { id: string }[] }).data[0].id;
  });

  const create = async (key: string, extra: Record<string, unknown> = {}) => {
    const res = await post(key, "/v1/responses", {
      model,
      input: "Say hello.",
      max_output_tokens: 2,
      temperature: 0,
      ...extra,
    });
    const body = (await res.json()) as { id: string; status: string; output?: unknown };
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(res.headers.get("x-kvctl-worker")).toBe("w0");
    return body;
  };

  it("another tenant's read, cancel and continuation get the answer of an id nobody used; the owner's are served", async () => {
    const mine = await create(KEY_A);
    const unknown = "resp_00000000000000000000000000000000";
    const asUnknown = async (path: (id: string) => string, method: "GET" | "POST") => {
      const call = (id: string) =>
        method === "GET" ? get(KEY_B, path(id)) : post(KEY_B, path(id));
      const theirs = await answer(await call(mine.id));
      const nobody = await answer(await call(unknown));
      expect(theirs.status).toBe(404);
      expect(JSON.stringify(theirs.body)).toBe(
        JSON.stringify(nobody.body).replace(unknown, mine.id),
      );
    };
    await asUnknown((id) => `/v1/responses/${id}`, "GET");
    await asUnknown((id) => `/v1/responses/${id}/cancel`, "POST");
    const cont = async (prev: string) =>
      answer(
        await post(KEY_B, "/v1/responses", {
          model,
          input: "And then?",
          max_output_tokens: 2,
          previous_response_id: prev,
        }),
      );
    const theirs = await cont(mine.id);
    const nobody = await cont(unknown);
    expect(theirs.status).toBe(404);
    expect(JSON.stringify(theirs.body)).toBe(JSON.stringify(nobody.body).replace(unknown, mine.id));
    // A's response is untouched, and its owner (and the admin key) reach it on its worker.
    for (const key of [KEY_A, ADMIN]) {
      const res = await get(key, `/v1/responses/${mine.id}`);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvctl-worker")).toBe("w0");
      const body = (await res.json()) as { id: string; output: unknown; status: string };
      expect([body.id, body.status, body.output]).toEqual([mine.id, mine.status, mine.output]);
    }
    // A continues its own response.
    const next = await create(KEY_A, { previous_response_id: mine.id });
    expect(next.id).not.toBe(mine.id);
  }, 120_000);

  it("a tenant cannot name its new response with another tenant's id", async () => {
    const mine = await create(KEY_A);
    const res = await post(KEY_B, "/v1/responses", {
      model,
      input: "Overwrite?",
      max_output_tokens: 2,
      request_id: mine.id,
    });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe("request_id");
    const still = (await (await get(KEY_A, `/v1/responses/${mine.id}`)).json()) as {
      output: unknown;
    };
    expect(still.output).toEqual(mine.output);
  }, 120_000);
});

describe("the hints route", () => {
  it("refuses a key given twice, naming it, and applies nothing", async () => {
    const res = await fetch(`${g.url}/kvctl/v1/sessions/s/events`, {
      method: "POST",
      headers: headers(KEY_A),
      body: '{"event":"idle","event":"close"}',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: {
        message: "duplicate key event",
        type: "invalid_request_error",
        param: "event",
        code: null,
      },
    });
    expect(await metricLines('kvctl_gateway_hints_total{event="close"')).toEqual([]);
    expect(await metricLines('kvctl_gateway_hints_total{event="idle"')).toEqual([]);
  });
});

describe("no session's end evicts another's cache", () => {
  // Two replicas sharing one session bucket, both pruning what a closed session leaves.
  const PRUNE_ON_CLOSE = {
    pins: { enabled: false },
    inflight: { enabled: false },
    tools: { enabled: false },
    think: { enabled: false },
    idle: { enabled: false },
    prune: { enabled: true, onClose: true },
    warm: { enabled: false },
  };
  let r1: Gateway;
  let r2: Gateway;

  const replica = () =>
    createGateway({
      config: {
        ...bed("tenants-prune"),
        auth: {
          // One cache for both: what a prune could take from another tenant.
          tenants: [
            { id: "a", keys: [hashKey(KEY_A)], cacheIsolation: "shared" },
            { id: "b", keys: [hashKey(KEY_B)], cacheIsolation: "shared" },
          ],
        },
        policies: PRUNE_ON_CLOSE,
      },
      policy: agentPolicy,
      decisionLog: () => undefined,
      log: () => undefined,
    });

  beforeAll(async () => {
    r1 = await replica();
    r2 = await replica();
  }, 120_000);
  afterAll(async () => {
    await r1?.close().catch(() => undefined);
    await r2?.close().catch(() => undefined);
  });

  /** B's session on r1 with A's system prompt, closed; the close's prune settled on r1. */
  const bSessionCloses = async (system: string, session: string) => {
    await ask(r1, KEY_B, system, "What is the weather like on Mars today, roughly?", session);
    const res = await fetch(`${r1.url}/kvctl/v1/sessions/${session}/events`, {
      method: "POST",
      headers: headers(KEY_B),
      body: JSON.stringify({ event: "close" }),
    });
    expect(res.status).toBe(202);
    const rec = await recordWhen(r1, `b/${session}`, (r) =>
      r.commands.some((c) => c.type === "Prune" && c.state !== "sending"),
    );
    return rec.commands.filter((c) => c.type === "Prune");
  };

  it("a session's close leaves another tenant's sessionless prefix cached", async () => {
    const system = systemOf("sessionless");
    await ask(r1, KEY_A, system, "Is it raining?");
    const before = await ask(r1, KEY_A, system, "Is it raining?");
    expect(before).toBeGreaterThan(600);
    const prunes = await bSessionCloses(system, "closes-1");
    expect(prunes.length).toBe(1);
    expect(await ask(r1, KEY_A, system, "Is it raining?")).toBeGreaterThanOrEqual(before);
  }, 180_000);

  it("a session's close leaves another replica's session's prefix cached", async () => {
    const system = systemOf("replica");
    const followed = async () =>
      Number(
        /kvctl_gateway_block_use_sessions (\d+)/.exec(await r1.metrics.registry.metrics())?.[1] ??
          -1,
      );
    const known = await followed();
    await ask(r2, KEY_A, system, "Is it snowing?", "theirs");
    const before = await ask(r2, KEY_A, system, "Is it snowing?", "theirs");
    expect(before).toBeGreaterThan(600);
    // r1 knows A's session from the bucket alone (its policy never saw a turn of it).
    await until("r1 follows a/theirs", async () => (await followed()) > known);
    await bSessionCloses(system, "closes-2");
    expect(await ask(r2, KEY_A, system, "Is it snowing?", "theirs")).toBeGreaterThanOrEqual(before);
  }, 180_000);
});

describe("cache isolation: salted", () => {
  // Two tenants and nothing said: each is cached in a namespace of its own.
  let s: Gateway;
  beforeAll(async () => {
    s = await createGateway({
      config: {
        ...bed("tenants-salted"),
        auth: {
          tenants: [
            { id: "a", keys: [hashKey(KEY_A)] },
            { id: "b", keys: [hashKey(KEY_B)] },
          ],
        },
      },
      decisionLog: () => undefined,
      log: () => undefined,
    });
  }, 120_000);
  afterAll(async () => {
    await s?.close().catch(() => undefined);
  });

  const USER = "What will the weather be in Oslo tomorrow?";

  it("another tenant's correct guess of a prompt gets the cached_tokens of a wrong one; the owner's reuse is whole", async () => {
    const system = systemOf("guessed");
    await ask(s, KEY_A, system, USER);
    const own = await ask(s, KEY_A, system, USER);
    expect(own).toBeGreaterThan(600);
    // B's guesses, each a prompt B never sent before: A's exact prompt, one nobody sent, and
    // A's prompt with a cache_salt naming A's namespace.
    const right = await ask(s, KEY_B, system, USER);
    const wrong = await ask(s, KEY_B, systemOf("nobody's"), USER);
    const salted = await ask(s, KEY_B, systemOf("guessed"), `${USER} `, undefined, {
      cache_salt: "kvctl/a",
    });
    expect({ right, salted }).toEqual({ right: wrong, salted: wrong });
    expect(wrong).toBeLessThan(64);
    // A's own prefix is still A's whole: B's requests took nothing from it.
    expect(await ask(s, KEY_A, system, USER)).toBeGreaterThanOrEqual(own);
  }, 180_000);

  it("a route with no cache namespace on the worker is refused for a salted tenant, saying why", async () => {
    const res = await fetch(`${s.url}/v1/messages`, {
      method: "POST",
      headers: headers(KEY_B, { "anthropic-version": "2023-06-01" }),
      body: JSON.stringify({
        model: "m",
        max_tokens: 2,
        messages: [{ role: "user", content: "Hi" }],
      }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toContain("cacheIsolation: salted");
  });

  it("the gateway hashes in the worker's namespace: a salted session's chain (what routing, the index and pins use) is the blocks the worker holds", async () => {
    const system = systemOf("chain");
    await ask(s, KEY_A, system, USER, "salted");
    const rec = await recordWhen(s, "a/salted", (r) => r.chain.length > 0);
    const chain = rec.chain.map((h) => BigInt(h));
    const pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 0 });
    const inspect = (await pub.send("w0", { type: "Inspect", block_hashes: chain })) as {
      detail?: { blocks?: { block_hash: number | bigint }[] };
    };
    pub.close();
    const held = new Set((inspect.detail?.blocks ?? []).map((b) => BigInt(b.block_hash)));
    expect(chain.filter((h) => held.has(h)).length).toBe(chain.length);
  }, 180_000);
});
