// Authentication, tenants and upstream credentials of the gateway, over real HTTP and a real
// nats-server with the agent policy: every route x {no key, wrong key, another tenant's key, the
// tenant's own key, the admin key} gives its documented status (docs/gateway-security.md), and a
// refusal changes nothing (the session record, the commands the worker's control plane received,
// the calls the worker got). Also: the worker's key on every call the gateway makes (the client's
// never), pin caps, tenant rate and concurrency limits, bad Authorization headers, bad key and TLS
// config, TLS on the listener with a reload (library and SIGHUP to the CLI), and NATS secrets from
// files. Two stand-ins (helpers/agent-policy-bed.ts): the worker's HTTP surface (a tiny node:http
// server that records the Authorization of every call) and its control plane (ReferenceResponder).
// The real worker's keys are tested in gateway-auth-real-server.test.ts.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, connect as netConnect } from "node:net";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { Agent, fetch as undiciFetch } from "undici";
import { describe, expect, it, vi } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { connectOptionsFromFlags } from "../src/control/connection-flags.js";
import { connectOptionsOf } from "../src/gateway/nats-link.js";
import { hashKey, KeyTable } from "../src/gateway/auth/keys.js";
import { GatewayConfigError, type GatewayConfigInput } from "../src/gateway/index.js";
import type { ReferenceResponder } from "../src/testing/index.js";
import { PAGE, useAgentPolicyBed } from "./helpers/agent-policy-bed.js";

const KEY_A = "tenant-a-key-0123456789";
const KEY_B = "tenant-b-key-0123456789";
const ADMIN = "admin-key-0123456789abcdef";
const WRONG = "not-a-key-0123456789abcd";
const WORKER_KEY = "worker-inference-key-0123";

const bed = useAgentPolicyBed("gateway-auth");
const logs: string[] = [];

const AUTH = {
  admin: { keys: [hashKey(ADMIN)] },
  tenants: [
    { id: "a", keys: [hashKey(KEY_A)] },
    { id: "b", keys: [hashKey(KEY_B)] },
  ],
};

function config(over: Partial<GatewayConfigInput> = {}): GatewayConfigInput {
  return bed.config({ auth: AUTH, ...over });
}

async function gw(over: Partial<GatewayConfigInput> = {}): Promise<Gateway> {
  const g = await createGateway({ config: config(over), log: (l) => logs.push(l) });
  bed.gateways.push(g);
  return g;
}

const responder = (...prompts: unknown[][]): Promise<ReferenceResponder> =>
  bed.responder(1000, ...prompts);

type Who = "none" | "wrong" | "other" | "client" | "admin";
const KEYS: Record<Who, string | null> = {
  none: null,
  wrong: WRONG,
  other: KEY_B,
  client: KEY_A,
  admin: ADMIN,
};
const WHO: readonly Who[] = ["none", "wrong", "other", "client", "admin"];

const bearer = (who: Who): Record<string, string> =>
  KEYS[who] ? { authorization: `Bearer ${KEYS[who]}` } : {};

const SYSTEM = {
  role: "system",
  content: [
    {
      type: "text",
      text: "You are a careful agent with many tools.",
      cache_control: { type: "ephemeral", ttl: "1h" },
    },
  ],
};
const MSGS = [SYSTEM, { role: "user", content: "hello there" }];

const chat = (g: Gateway, session: string, headers: Record<string, string>) =>
  fetch(`${g.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-session-id": session, ...headers },
    body: JSON.stringify({ model: "tiny", messages: MSGS }),
  });

const hint = (g: Gateway, session: string, headers: Record<string, string>, event = "idle") =>
  fetch(`${g.url}/kvctl/v1/sessions/${encodeURIComponent(session)}/events`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ event }),
  });

interface Case {
  route: string;
  call: (g: Gateway, who: Who, n: number) => Promise<Response>;
  expect: Record<Who, number>;
}

// The documented matrix (docs/gateway-security.md). Session "owned" was opened with tenant a's key:
// it is stored as "a/owned" (a tenant's ids are its own), which the admin key names.
const MATRIX: Case[] = [
  {
    route: "GET /health",
    call: (g, w) => fetch(`${g.url}/health`, { headers: bearer(w) }),
    expect: { none: 200, wrong: 401, other: 200, client: 200, admin: 200 },
  },
  {
    route: "GET /metrics",
    call: (g, w) => fetch(`${g.url}/metrics`, { headers: bearer(w) }),
    expect: { none: 401, wrong: 401, other: 403, client: 403, admin: 200 },
  },
  {
    route: "GET /v1/models",
    call: (g, w) => fetch(`${g.url}/v1/models`, { headers: bearer(w) }),
    expect: { none: 401, wrong: 401, other: 200, client: 200, admin: 200 },
  },
  {
    route: "POST chat, new session",
    call: (g, w, n) => chat(g, `new-${w}-${n}`, bearer(w)),
    expect: { none: 401, wrong: 401, other: 200, client: 200, admin: 200 },
  },
  {
    route: "POST hint, tenant a's session",
    call: (g, w) => hint(g, "owned", bearer(w)),
    expect: { none: 401, wrong: 401, other: 404, client: 202, admin: 404 },
  },
  {
    route: "POST hint, tenant a's session by its stored id",
    call: (g, w) => hint(g, "a/owned", bearer(w)),
    expect: { none: 401, wrong: 401, other: 404, client: 404, admin: 202 },
  },
  {
    route: "POST hint, unknown session",
    call: (g, w) => hint(g, "ghost", bearer(w)),
    expect: { none: 401, wrong: 401, other: 404, client: 404, admin: 404 },
  },
  // Tenant b's and the admin's turns on "owned" open sessions of their own ("b/owned", "owned").
  {
    route: "POST chat, tenant a's session",
    call: (g, w) => chat(g, "owned", bearer(w)),
    expect: { none: 401, wrong: 401, other: 200, client: 200, admin: 200 },
  },
  {
    route: "GET admin API",
    call: (g, w) => fetch(`${g.url}/kvctl/v1/admin/workers`, { headers: bearer(w) }),
    expect: { none: 401, wrong: 401, other: 403, client: 403, admin: 200 },
  },
  {
    route: "GET unknown route",
    call: (g, w) => fetch(`${g.url}/kvctl/v1/nothing`, { headers: bearer(w) }),
    expect: { none: 401, wrong: 401, other: 403, client: 403, admin: 404 },
  },
];

/** What a refusal must leave as it was. */
async function snapshot(g: Gateway, r: ReferenceResponder): Promise<string> {
  await g.settled();
  const rec = await g.sessions.get("a/owned");
  const ghost = await g.sessions.get("ghost");
  return JSON.stringify({
    rec,
    ghost,
    commands: r.received.length,
    calls: bed.up.calls.filter((c) => !c.path.startsWith("/health")).length,
  });
}

describe("gateway auth matrix", () => {
  it("every route x key gives its documented status; a refusal changes nothing", async () => {
    const r = await responder(MSGS);
    const g = await gw();
    // Tenant a opens the session (its marker pins the system prompt).
    expect((await chat(g, "owned", bearer("client"))).status).toBe(200);
    await g.settled();
    expect((await g.sessions.get("a/owned"))?.tenant).toBe("a");
    expect(await g.sessions.get("owned")).toBeNull();
    let n = 0;
    const seen: string[] = [];
    // Refusals first (their effect would show in the snapshot), then the admitted calls.
    const order = [...WHO].sort(
      (x, y) => Number(x === "client" || x === "admin") - Number(y === "client" || y === "admin"),
    );
    for (const c of MATRIX) {
      for (const who of order) {
        const before = await snapshot(g, r);
        const res = await c.call(g, who, n++);
        const body = await res.text();
        seen.push(`${c.route} [${who}] ${res.status}`);
        expect(`${c.route} [${who}] ${res.status}`).toBe(`${c.route} [${who}] ${c.expect[who]}`);
        if (res.status === 401) expect(res.headers.get("www-authenticate")).toBe("Bearer");
        if (res.status >= 400) expect(JSON.parse(body).error.message).toBeTruthy();
        if (res.status === 401 || res.status === 403 || res.status === 404)
          expect(await snapshot(g, r)).toBe(before);
      }
    }
    expect(seen).toHaveLength(MATRIX.length * WHO.length);
    // Refusals are counted by reason.
    const metrics = await (await fetch(`${g.url}/metrics`, { headers: bearer("admin") })).text();
    expect(metrics).toMatch(/kvctl_gateway_auth_refused_total\{reason="missing_key"\} \d+/);
    expect(metrics).toMatch(/kvctl_gateway_auth_refused_total\{reason="not_admin"\} \d+/);
  }, 120_000);

  it("another tenant's session id is a session of its own: answered as an unused id, the owner's session untouched", async () => {
    const r = await responder(MSGS);
    const g = await gw();
    expect((await chat(g, "priv", bearer("client"))).status).toBe(200);
    await g.settled();
    const owner = JSON.stringify(await g.sessions.get("a/priv"));
    expect(JSON.parse(owner)).toMatchObject({ tenant: "a" });
    const commandsBefore = r.received.length;
    const looked: string[] = [];
    const get = g.sessions.get.bind(g.sessions);
    const spy = vi.spyOn(g.sessions, "get").mockImplementation((id: string) => {
      looked.push(id);
      return get(id);
    });
    // Tenant b names a's id and an id nobody used, the same way: every hint (the destructive ones
    // included), then a turn (it opens b's own session), then a hint on that.
    const answers: Record<string, string[]> = { priv: [], unused: [] };
    const hintAnswer = async (id: string, event: string) => {
      const h = await hint(g, id, bearer("other"), event);
      return `${h.status} ${(await h.text()).replaceAll(id, "<id>")}`;
    };
    for (const [name, id] of [
      ["priv", "priv"],
      ["unused", "never-used"],
    ] as const) {
      for (const event of ["tool_start", "idle", "rewrite", "close"])
        answers[name].push(await hintAnswer(id, event));
      const t = await chat(g, id, bearer("other"));
      answers[name].push(
        `${t.status} ${JSON.stringify(Object.keys((await t.json()) as object).sort())}`,
      );
      await g.settled();
      answers[name].push(await hintAnswer(id, "idle"));
    }
    await g.settled();
    spy.mockRestore();
    expect(answers.priv).toEqual(answers.unused);
    for (const a of answers.priv.slice(0, 4)) expect(a).toMatch(/^404 /);
    expect(answers.priv.slice(4)).toEqual([
      expect.stringMatching(/^200 /),
      expect.stringMatching(/^202 /),
    ]);
    // Every lookup b's requests made was in b's namespace: a's session was never read, let alone changed.
    expect(looked.length).toBeGreaterThan(0);
    for (const id of looked) expect(id.startsWith("b/")).toBe(true);
    expect(JSON.stringify(await g.sessions.get("a/priv"))).toBe(owner);
    expect((await g.sessions.get("b/priv"))?.tenant).toBe("b");
    const named = r.received
      .slice(commandsBefore)
      .filter((c) =>
        JSON.stringify(c.command ?? {}, (_k, v) =>
          typeof v === "bigint" ? String(v) : v,
        ).includes("a/priv"),
      );
    expect(named).toEqual([]);
    // Tenant a still has its session.
    expect((await hint(g, "priv", bearer("client"))).status).toBe(202);
  }, 60_000);

  it("/health names worker URLs to the admin key only; x-api-key works like Bearer", async () => {
    await responder();
    const g = await gw();
    const pub = (await (await fetch(`${g.url}/health`)).json()) as {
      workers: { id: string; url?: string }[];
    };
    expect(pub.workers[0]).toMatchObject({ id: "w0" });
    expect(pub.workers[0]?.url).toBeUndefined();
    const adm = (await (await fetch(`${g.url}/health`, { headers: bearer("admin") })).json()) as {
      workers: { url?: string }[];
    };
    expect(adm.workers[0]?.url).toBe(bed.up.url);
    expect((await fetch(`${g.url}/v1/models`, { headers: { "x-api-key": KEY_A } })).status).toBe(
      200,
    );
    expect((await fetch(`${g.url}/metrics`, { headers: { "x-api-key": ADMIN } })).status).toBe(200);
  }, 60_000);

  it("with only an admin key configured, inference is open and everything else needs the admin key", async () => {
    await responder();
    const g = await gw({ auth: { admin: { keys: [hashKey(ADMIN)] } } });
    expect((await chat(g, "anon", {})).status).toBe(200);
    expect((await fetch(`${g.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${g.url}/metrics`, { headers: bearer("admin") })).status).toBe(200);
  }, 60_000);
});

describe("upstream credentials", () => {
  it("the worker's key goes on every call the gateway makes; the client's key never reaches the worker", async () => {
    await responder();
    const from = bed.up.calls.length;
    process.env.KVCTL_TEST_WORKER_KEY = WORKER_KEY;
    const g = await gw({
      workers: [{ id: "w0", url: bed.up.url, apiKeyEnv: "KVCTL_TEST_WORKER_KEY" }],
    });
    expect((await chat(g, "cred", { ...bearer("client"), "x-api-key": KEY_A })).status).toBe(200);
    expect((await fetch(`${g.url}/v1/models`, { headers: bearer("client") })).status).toBe(200);
    await g.checkHealth();
    await g.settled();
    const calls = bed.up.calls.slice(from);
    const paths = new Set(calls.map((c) => c.path.split("?")[0]));
    for (const p of ["/server_info", "/v1/chat/completions", "/v1/models", "/health"])
      expect(paths).toContain(p);
    for (const c of calls)
      expect({ path: c.path, auth: c.auth, xkey: c.xkey }).toEqual({
        path: c.path,
        auth: `Bearer ${WORKER_KEY}`,
        xkey: undefined,
      });
  }, 60_000);

  it("with gateway auth on and no worker key, the client's key is not forwarded", async () => {
    await responder();
    const from = bed.up.calls.length;
    const g = await gw();
    expect((await chat(g, "fwd", bearer("client"))).status).toBe(200);
    await g.settled();
    for (const c of bed.up.calls.slice(from)) expect(c.auth).toBeUndefined();
  }, 60_000);
});

describe("tenant limits", () => {
  it("a session's pins are capped: the marker's pin goes out trimmed to the cap", async () => {
    const r = await responder(MSGS);
    const g = await gw({
      auth: { tenants: [{ id: "a", keys: [hashKey(KEY_A)], maxPinnedBlocksPerSession: 2 }] },
    });
    expect((await chat(g, "capped", bearer("client"))).status).toBe(200);
    await g.settled();
    const pins = r.received
      .filter((x) => x.command?.type === "Cache" && x.command.pin)
      .map((x) => (x.command?.type === "Cache" ? x.command.block_hashes.length : 0));
    expect(pins).toEqual([2]);
    // A second turn asks again for the marker's blocks: the session is at its cap, nothing more is pinned.
    expect((await chat(g, "capped", bearer("client"))).status).toBe(200);
    await g.settled();
    const total = r.received
      .filter((x) => x.command?.type === "Cache" && x.command.pin)
      .reduce((s, x) => s + (x.command?.type === "Cache" ? x.command.block_hashes.length : 0), 0);
    expect(total).toBeLessThanOrEqual(2);
    const rec = await g.sessions.get("a/capped");
    expect(rec?.pins.reduce((s, p) => s + p.blockHashes.length, 0)).toBeLessThanOrEqual(2);
    // The policy capped the pin itself: its budget view holds what went out, and the gateway's
    // backstop had nothing to cut (a pin the backstop cuts is acked to its rule as sent:
    // test/command-ids.test.ts).
    const text = await g.metrics.registry.metrics();
    const used = text
      .split("\n")
      .filter((l) => l.startsWith("kvctl_policy_pin_budget_used_blocks{"))
      .reduce((n, l) => n + Number(l.split(" ").pop()), 0);
    expect(used).toBe(2);
    expect(text.split("\n").filter((l) => l.startsWith("kvctl_gateway_pin_cap_total{"))).toEqual(
      [],
    );
  }, 60_000);

  it("a tenant over its request rate gets 429 with Retry-After; another tenant is not affected", async () => {
    await responder();
    const g = await gw({
      auth: {
        tenants: [
          { id: "a", keys: [hashKey(KEY_A)], requestsPerSecond: 0.01, burst: 2 },
          { id: "b", keys: [hashKey(KEY_B)] },
        ],
      },
    });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++)
      statuses.push((await fetch(`${g.url}/v1/models`, { headers: bearer("client") })).status);
    expect(statuses).toEqual([200, 200, 429]);
    const res = await fetch(`${g.url}/v1/models`, { headers: bearer("client") });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await res.json()) as unknown).toMatchObject({ error: { type: "rate_limit_error" } });
    expect((await fetch(`${g.url}/v1/models`, { headers: bearer("other") })).status).toBe(200);
  }, 60_000);

  it("a tenant at its concurrency limit gets 429 until a request finishes", async () => {
    await responder();
    let release: () => void = () => undefined;
    const held = new Promise<void>((res) => (release = res));
    let arrived: () => void = () => undefined;
    const isIn = new Promise<void>((res) => (arrived = res));
    const slow = createServer(async (req, res) => {
      for await (const _ of req);
      if (req.url === "/server_info") return res.end(JSON.stringify({ page_size: PAGE }));
      if (req.url === "/v1/models") {
        arrived();
        await held;
      }
      res.end("{}");
    });
    slow.listen(0, "127.0.0.1");
    await once(slow, "listening");
    try {
      const g = await gw({
        workers: [{ id: "w0", url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}` }],
        auth: { tenants: [{ id: "a", keys: [hashKey(KEY_A)], maxConcurrent: 1 }] },
      });
      const first = fetch(`${g.url}/v1/models`, { headers: bearer("client") });
      await isIn;
      expect((await fetch(`${g.url}/v1/models`, { headers: bearer("client") })).status).toBe(429);
      release();
      expect((await first).status).toBe(200);
      await new Promise<void>((res) => setImmediate(res));
      expect((await fetch(`${g.url}/v1/models`, { headers: bearer("client") })).status).toBe(200);
    } finally {
      slow.closeAllConnections();
      slow.close();
    }
  }, 60_000);
});

describe("bad input", () => {
  it("oversized, malformed and conflicting key headers: refused with the header named", async () => {
    await responder();
    const g = await gw();
    const big = await fetch(`${g.url}/v1/models`, {
      headers: { authorization: `Bearer ${"k".repeat(2000)}` },
    });
    expect(big.status).toBe(431);
    expect(((await big.json()) as { error: { param: string } }).error.param).toBe("authorization");
    for (const authorization of [
      "Basic abc",
      "Bearer",
      `Bearer ${KEY_A} extra`,
      `Token ${KEY_A}`,
    ]) {
      const res = await fetch(`${g.url}/v1/models`, { headers: { authorization } });
      expect(res.status).toBe(401);
      const body = (await res.json()) as { error: { message: string; param: string } };
      expect(body.error.param).toBe("authorization");
      expect(body.error.message).toContain("Bearer <key>");
    }
    const both = await fetch(`${g.url}/v1/models`, {
      headers: { authorization: `Bearer ${KEY_A}`, "x-api-key": KEY_B },
    });
    expect(both.status).toBe(401);
    expect(((await both.json()) as { error: { param: string } }).error.param).toBe("x-api-key");
    // Anthropic clients get Anthropic's error shape.
    const anth = await fetch(`${g.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: "{}",
    });
    expect(anth.status).toBe(401);
    expect(await anth.json()).toMatchObject({
      type: "error",
      error: { type: "authentication_error" },
    });
  }, 60_000);

  it("an oversized x-api-key, and key headers with a control or non-ASCII character: refused with the header named", async () => {
    await responder();
    const g = await gw();
    const big = await fetch(`${g.url}/v1/models`, { headers: { "x-api-key": "k".repeat(2000) } });
    expect(big.status).toBe(431);
    expect(((await big.json()) as { error: { param: string } }).error.param).toBe("x-api-key");
    // fetch refuses to send these bytes: a raw request carries them as a client could.
    const raw = (header: string): Promise<string> =>
      new Promise((resolve, reject) => {
        const s = netConnect(Number(new URL(g.url).port), "127.0.0.1", () =>
          s.end(
            Buffer.concat([
              Buffer.from("GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"),
              Buffer.from(header, "latin1"),
              Buffer.from("\r\n\r\n"),
            ]),
          ),
        );
        let got = "";
        s.on("data", (d) => (got += d.toString()));
        s.on("close", () => resolve(got));
        s.on("error", reject);
      });
    // node's HTTP parser refuses a control byte in a header itself (400, before any route); a
    // non-ASCII byte or a tab reaches the gateway, which refuses the header by name.
    const from = bed.up.calls.length;
    for (const [name, header, expected] of [
      ["authorization", `authorization: Bearer ${KEY_A.slice(0, 8)}\u0001${KEY_A.slice(9)}`, 400],
      ["x-api-key", `x-api-key: ${KEY_A.slice(0, 8)}\u007f${KEY_A.slice(9)}`, 400],
      ["authorization", `authorization: Bearer ${KEY_A.slice(0, 8)}\u00e9${KEY_A.slice(9)}`, 401],
      ["authorization", `authorization: Bearer ${KEY_A.slice(0, 8)}\t${KEY_A.slice(9)}`, 401],
      ["x-api-key", `x-api-key: ${KEY_A.slice(0, 8)}\u00e9${KEY_A.slice(9)}`, 401],
    ] as const) {
      const answer = await raw(header);
      expect(`${JSON.stringify(header)} ${answer.split(" ")[1]}`).toBe(
        `${JSON.stringify(header)} ${expected}`,
      );
      if (expected === 401)
        expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)).error.param).toBe(name);
    }
    expect(bed.up.calls.length).toBe(from);
  }, 60_000);

  const refused = async (over: Partial<GatewayConfigInput>, field: string) => {
    const e = await createGateway({ config: config(over), log: () => undefined }).then(
      (g) => {
        bed.gateways.push(g);
        return null;
      },
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(GatewayConfigError);
    expect((e as Error).message).toContain(field);
    return (e as Error).message;
  };

  it("bad key config refuses to start, naming the field", async () => {
    expect(
      await refused({ auth: { tenants: [{ id: "a", keys: [KEY_A] }] } }, "auth.tenants.0.keys.0"),
    ).toContain("sha256:");
    expect(
      await refused(
        {
          auth: {
            tenants: [
              { id: "a", keys: [hashKey(KEY_A)] },
              { id: "b", keys: [hashKey(KEY_A)] },
            ],
          },
        },
        "auth.tenants.1.keys.0",
      ),
    ).toContain("duplicate key (the same key as auth.tenants.0.keys.0)");
    await refused(
      {
        auth: { admin: { keys: [hashKey(KEY_A)] }, tenants: [{ id: "a", keys: [hashKey(KEY_A)] }] },
      },
      "duplicate key",
    );
    process.env.KVCTL_TEST_CTRL_KEY = "abc\u0007defghijklmnopqrstu";
    expect(
      await refused(
        { auth: { tenants: [{ id: "a", keyEnv: "KVCTL_TEST_CTRL_KEY" }] } },
        "auth.tenants.0.keyEnv",
      ),
    ).toContain("control character");
    const keyFile = join(bed.dir, "keys.txt");
    writeFileSync(keyFile, `${KEY_A}\nshort\n`);
    expect(await refused({ auth: { tenants: [{ id: "a", keyFile }] } }, "line 2")).toContain(
      "shorter than",
    );
    await refused(
      { auth: { tenants: [{ id: "a", keyEnv: "KVCTL_TEST_UNSET_VAR" }] } },
      "KVCTL_TEST_UNSET_VAR",
    );
    await refused({ auth: { tenants: [{ id: "a", keys: [] }] } }, "has no key");
    await refused(
      { workers: [{ id: "w0", url: bed.up.url, apiKeyEnv: "KVCTL_TEST_UNSET_VAR" }] },
      "workers[w0].apiKeyEnv",
    );
    await refused(
      { workers: [{ id: "w0", url: bed.up.url, apiKey: "worker\u0000key-0123456789" }] },
      "workers[w0].apiKey",
    );
    expect(await refused({ auth: { admin: { keys: [ADMIN] } } }, "auth.admin.keys.0")).toContain(
      "sha256:",
    );
    await refused(
      { auth: { tenants: [{ id: "a", keys: [hashKey(KEY_A), hashKey(KEY_A)] }] } },
      "auth.tenants.0.keys.1",
    );
    const ctrlFile = join(bed.dir, "ctrl-keys.txt");
    writeFileSync(ctrlFile, `${KEY_B}\nabc\u0001defghijklmnopqrstu\n`);
    expect(
      await refused({ auth: { tenants: [{ id: "a", keyFile: ctrlFile }] } }, "line 2"),
    ).toContain("control character");
  });

  it("a TLS file that does not parse refuses to start, naming the field", async () => {
    const { cert, key } = selfSigned("bad");
    const junk = join(bed.dir, "junk.pem");
    writeFileSync(junk, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
    await refused(
      { listen: { host: "127.0.0.1", port: 0, tls: { cert: junk, key } } },
      "listen.tls.cert",
    );
    await refused(
      { listen: { host: "127.0.0.1", port: 0, tls: { cert, key: junk } } },
      "listen.tls.key",
    );
    const other = selfSigned("other");
    await refused(
      { listen: { host: "127.0.0.1", port: 0, tls: { cert, key: other.key } } },
      "is not the key of the certificate",
    );
    await refused(
      { listen: { host: "127.0.0.1", port: 0, tls: { cert: join(bed.dir, "missing.pem"), key } } },
      "listen.tls.cert: cannot read",
    );
  });
});

/** A self-signed certificate for 127.0.0.1 (openssl), its files and SHA-256 fingerprint. */
function selfSigned(name: string): { cert: string; key: string; fingerprint: string } {
  const cert = join(bed.dir, `${name}.crt`);
  const key = join(bed.dir, `${name}.key`);
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      `/CN=${name}`,
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { stdio: "ignore" },
  );
  const fp =
    execFileSync("openssl", ["x509", "-in", cert, "-noout", "-fingerprint", "-sha256"])
      .toString()
      .trim()
      .split("=")[1] ?? "";
  return { cert, key, fingerprint: fp };
}

/** The fingerprint of the certificate the listener serves now. */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: "127.0.0.1", port, rejectUnauthorized: false }, () => {
      resolve(s.getPeerCertificate().fingerprint256);
      s.end();
    });
    s.on("error", reject);
  });
}

describe("TLS on the listener", () => {
  it("serves HTTPS; a reload picks up a new certificate; a bad reload keeps the old one", async () => {
    await responder();
    const first = selfSigned("first");
    const cert = join(bed.dir, "live.crt");
    const key = join(bed.dir, "live.key");
    writeFileSync(cert, readFileSync(first.cert));
    writeFileSync(key, readFileSync(first.key));
    const g = await gw({ listen: { host: "127.0.0.1", port: 0, tls: { cert, key } } });
    expect(g.url.startsWith("https://")).toBe(true);
    const agent = new Agent({ connect: { ca: readFileSync(first.cert) } });
    const res = await undiciFetch(`${g.url}/v1/models`, {
      headers: bearer("client"),
      dispatcher: agent,
    });
    expect(res.status).toBe(200);
    expect(await servedFingerprint(g.port)).toBe(first.fingerprint);
    // A bad pair: the reload throws, naming the field; the listener keeps the first certificate.
    writeFileSync(cert, "garbage");
    expect(() => g.reloadTls()).toThrow(/listen\.tls\.cert/);
    expect(await servedFingerprint(g.port)).toBe(first.fingerprint);
    // A good new pair is served from the next connection on.
    const second = selfSigned("second");
    writeFileSync(cert, readFileSync(second.cert));
    writeFileSync(key, readFileSync(second.key));
    g.reloadTls();
    expect(await servedFingerprint(g.port)).toBe(second.fingerprint);
    await agent.close();
  }, 60_000);
});

describe("secrets from files and the environment", () => {
  it("NATS password and token come from files or env; the flag forms warn that they show in ps", () => {
    const pw = join(bed.dir, "nats-password");
    const tok = join(bed.dir, "nats-token");
    writeFileSync(pw, "s3cret-from-file\n");
    writeFileSync(tok, "tok-from-file\n");
    const writes: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((c: string | Uint8Array) => {
      writes.push(String(c));
      return true;
    });
    try {
      const fromFiles = connectOptionsFromFlags(
        { user: "u", "password-file": pw, "token-file": tok },
        "t",
      );
      expect([fromFiles.pass, fromFiles.token]).toEqual(["s3cret-from-file", "tok-from-file"]);
      expect(writes).toEqual([]);
      const fromFlag = connectOptionsFromFlags({ user: "u", password: "on-the-command-line" }, "t");
      expect(fromFlag.pass).toBe("on-the-command-line");
      expect(writes.join("")).toContain("--password on the command line shows in ps");
      expect(() =>
        connectOptionsFromFlags({ "password-file": join(bed.dir, "absent") }, "t"),
      ).toThrow(/--password-file: cannot read/);
      const gwOpts = connectOptionsOf(
        {
          url: "nats://127.0.0.1:1",
          passwordFile: pw,
          tokenFile: tok,
          opTimeoutMs: 500,
          commandTimeoutMs: 1000,
          commandRetries: 2,
        },
        "gw",
      );
      expect([gwOpts.pass, gwOpts.token]).toEqual(["s3cret-from-file", "tok-from-file"]);
    } finally {
      spy.mockRestore();
    }
  });
});

/** The CLI with its stderr, and a wait for a line in it (the gateway says what it did). */
function gatewayCli(args: string[]) {
  const child: ChildProcess = spawn(
    process.execPath,
    ["--import", "tsx", "src/cli/bin.ts", "gateway", ...args],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let err = "";
  const waiters: { text: string; resolve: () => void }[] = [];
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
    for (const w of waiters.splice(0))
      if (err.includes(w.text)) w.resolve();
      else waiters.push(w);
  });
  const saw = (text: string) =>
    err.includes(text)
      ? Promise.resolve()
      : new Promise<void>((resolve) => waiters.push({ text, resolve }));
  return { child, err: () => err, saw };
}

describe("kvctl gateway (the CLI)", () => {
  it("SIGHUP reloads the TLS pair; a bad pair is logged and the old one kept; a bad key config exits 2 naming the field", async () => {
    const first = selfSigned("cli-first");
    const cert = join(bed.dir, "cli.crt");
    const key = join(bed.dir, "cli.key");
    writeFileSync(cert, readFileSync(first.cert));
    writeFileSync(key, readFileSync(first.key));
    const file = join(bed.dir, "gw-tls.yaml");
    writeFileSync(
      file,
      `listen: { host: 127.0.0.1, port: 0, tls: { cert: ${cert}, key: ${key} } }\nworkers:\n  - id: w0\n    url: ${bed.up.url}\nauth:\n  tenants:\n    - id: a\n      keys: ["${hashKey(KEY_A)}"]\n`,
    );
    const g = gatewayCli(["--config", file, "--no-nats"]);
    try {
      await g.saw("listening on https://");
      const port = Number(/listening on https:\/\/127\.0\.0\.1:(\d+)/.exec(g.err())?.[1]);
      expect(await servedFingerprint(port)).toBe(first.fingerprint);
      writeFileSync(key, "not a key");
      g.child.kill("SIGHUP");
      await g.saw("TLS reload failed, still serving the previous certificate: listen.tls.key");
      expect(await servedFingerprint(port)).toBe(first.fingerprint);
      const second = selfSigned("cli-second");
      writeFileSync(cert, readFileSync(second.cert));
      writeFileSync(key, readFileSync(second.key));
      g.child.kill("SIGHUP");
      await g.saw("TLS certificate and key reloaded");
      expect(await servedFingerprint(port)).toBe(second.fingerprint);
    } finally {
      g.child.kill("SIGTERM");
      if (g.child.exitCode === null) await once(g.child, "exit");
    }
    const badFile = join(bed.dir, "gw-bad.yaml");
    writeFileSync(
      badFile,
      `workers:\n  - id: w0\n    url: ${bed.up.url}\nauth:\n  tenants:\n    - id: a\n      keys: ["${KEY_A}"]\n`,
    );
    const bad = gatewayCli(["--config", badFile, "--no-nats"]);
    const [code] = await once(bad.child, "exit");
    expect(code).toBe(2);
    expect(bad.err()).toContain("auth.tenants.0.keys.0: must be 'sha256:'");
  }, 90_000);
});

describe("kvctl gateway: a listener off loopback (protected mode)", () => {
  const worker = () => `workers:\n  - id: w0\n    url: ${bed.up.url}\n`;
  const auth = () => `auth:\n  tenants:\n    - id: a\n      keys: ["${hashKey(KEY_A)}"]\n`;
  const file = (name: string, text: string) => {
    const p = join(bed.dir, name);
    writeFileSync(p, text);
    return p;
  };
  const stop = async (c: ReturnType<typeof gatewayCli>) => {
    c.child.kill("SIGTERM");
    if (c.child.exitCode === null) await once(c.child, "exit");
  };

  it("--listen keeps the file's TLS section: the flag's address serves TLS with the file's certificate", async () => {
    const { cert, key, fingerprint } = selfSigned("cli-listen");
    const tls = `listen: { host: 127.0.0.1, port: 8080, tls: { cert: ${cert}, key: ${key} } }\n`;
    const path = file("listen-tls.yaml", tls + worker() + auth());
    const g = gatewayCli(["--config", path, "--listen", "0.0.0.0:0", "--no-nats"]);
    try {
      await g.saw("listening on ");
      const m = /listening on (https?):\/\/127\.0\.0\.1:(\d+)/.exec(g.err());
      expect(m?.[1]).toBe("https");
      expect(await servedFingerprint(Number(m?.[2]))).toBe(fingerprint);
      expect(g.err()).not.toContain("--insecure");
    } finally {
      await stop(g);
    }
  }, 60_000);

  it("without TLS or auth it exits 2 naming what is missing; --insecure starts and says what it gives up; loopback needs neither", async () => {
    const { cert, key } = selfSigned("cli-exposed");
    const tls = `listen: { tls: { cert: ${cert}, key: ${key} } }\n`;
    const cases: [string, string, string][] = [
      ["no-tls.yaml", worker() + auth(), "listen.tls is not configured"],
      ["no-auth.yaml", tls + worker(), "auth is not configured"],
      ["neither.yaml", worker(), "listen.tls and auth are not configured"],
    ];
    for (const [name, text, missing] of cases) {
      const c = gatewayCli(["--config", file(name, text), "--listen", "0.0.0.0:0", "--no-nats"]);
      const [code] = await once(c.child, "close");
      expect(code).toBe(2);
      expect(c.err()).toContain(
        `listen.host: 0.0.0.0 is reachable from other machines and ${missing}`,
      );
      expect(c.err()).toContain("--insecure");
    }
    const open = ["--config", join(bed.dir, "neither.yaml"), "--no-nats"];
    const ins = gatewayCli([...open, "--listen", "0.0.0.0:0", "--insecure"]);
    try {
      await ins.saw("--insecure: listening on 0.0.0.0 without listen.tls");
      expect(ins.err()).toContain("client keys travel in the clear");
      expect(ins.err()).toContain("without auth anyone who can reach it may call the workers");
      await ins.saw("listening on http://127.0.0.1:");
    } finally {
      await stop(ins);
    }
    const lo = gatewayCli([...open, "--listen", "127.0.0.1:0"]);
    try {
      await lo.saw("listening on http://127.0.0.1:");
      expect(lo.err()).not.toContain("--insecure");
    } finally {
      await stop(lo);
    }
  }, 90_000);
});

describe("key table", () => {
  it("finds each key's owner however often it is presented, and never a near miss of a key it has seen", () => {
    const table = new KeyTable<string>();
    const keys = Array.from({ length: 1100 }, (_, i) => `tenant-key-${i}-0123456789abcdef`);
    for (const [i, k] of keys.entries()) table.add(hashKey(k), `t${i}`);
    // Twice over more keys than the table remembers: the remembered and the re-hashed agree.
    for (let round = 0; round < 2; round++)
      for (const [i, k] of keys.entries()) expect(table.lookup(k)).toBe(`t${i}`);
    for (const k of keys.slice(0, 50)) {
      expect(table.lookup(`${k}x`)).toBeNull();
      expect(table.lookup(k.slice(0, -1))).toBeNull();
      expect(table.lookup(k.toUpperCase())).toBeNull();
    }
    expect(table.lookup("never-configured")).toBeNull();
    expect(table.lookup("never-configured")).toBeNull();
  });
});
