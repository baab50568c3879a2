// Commands with names: every command the agent policy emits carries an id from the transaction
// that emitted it, goes out under that id, and its ack finds the rule that sent it by that id,
// whatever the gateway did to the command on its way (a tenant's pin cap trimmed it, the hold
// ledger narrowed an unpin). Against a real patched SGLang server on CPU and a real nats-server: a
// pin the gateway's cap backstop trims is acked to its rule as the command that was sent, and the
// policy's budget view then equals the pins the worker's own Inspect reports, block by block.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import type { Observation } from "../src/contract/observations.js";
import type { GatewayPolicy, PolicyCommand } from "../src/contract/policy.js";
import { ControlPublisher } from "../src/control/publisher.js";
import { hashKey } from "../src/gateway/auth/keys.js";
import { type HoldEnv, prepareHold, settleHold } from "../src/gateway/sessions/holds/holds.js";
import { newSessionRecord } from "../src/gateway/sessions/holds/record.js";
import { type AgentPolicy, createAgentPolicy } from "../src/policy/agent-policy.js";
import { isUuidv7 } from "../src/protocol/index.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { ack, chainOf, finished, joined, PAGE } from "./helpers/policy-observations.js";
import { recordWhen } from "./helpers/poll.js";
import { type SglangServer, startSglangServer } from "./helpers/sglang-server.js";

const PINS_ONLY = {
  pins: { enabled: true },
  inflight: { enabled: false },
  tools: { enabled: false },
  think: { enabled: false },
  idle: { enabled: false },
  prune: { enabled: false },
  warm: { enabled: false },
};

describe("the policy names each command and finds its rule by that name", () => {
  const marked = (at: number, chain: bigint[]) =>
    finished(at, "s", chain, {
      markers: { breakpoints: [{ tokens: 6 * PAGE, ttlSeconds: 3600, at: "system" }], errors: [] },
    });

  it("every command a transaction emits has an id of its own; an ack carrying a copy of the command, trimmed, reaches its rule", async () => {
    const registry = new Registry();
    const p = createAgentPolicy({ config: PINS_ONLY, registry, log: () => undefined });
    p.observe(joined(0));
    const chain = chainOf(8);
    const out = p.observe(marked(1000, chain));
    expect(out.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain.slice(0, 6), pin: true, ttl_seconds: 3600 },
    ]);
    expect(out.every((c) => typeof c.id === "string" && isUuidv7(c.id))).toBe(true);
    expect(p.state.budget.used("w0")).toBe(6);
    // The gateway sent a new object: the same id, two of the six blocks (a cap cut the rest).
    const sent: PolicyCommand = {
      ...out[0],
      command: { type: "Cache", block_hashes: chain.slice(0, 2), pin: true, ttl_seconds: 3600 },
    };
    p.observe(ack(2000, sent, "applied", { affected: 2 }));
    expect(p.state.budget.used("w0")).toBe(2);
    expect(
      chain.map((h) => p.state.budget.holdsAt("w0", h).length),
      "the view holds what was sent, nothing else",
    ).toEqual([1, 1, 0, 0, 0, 0, 0, 0]);
    const acks = (await registry.metrics())
      .split("\n")
      .filter((l) => l.startsWith("kvctl_policy_acks_total{"));
    expect(acks).toEqual([
      'kvctl_policy_acks_total{policy="cache_markers",type="Cache",status="applied"} 1',
    ]);
    // An ack under an id no rule sent changes nothing.
    p.observe(ack(3000, { ...sent, id: "someone-else" }, "rejected"));
    expect(p.state.budget.used("w0")).toBe(2);
  });

  it("each command gets an id of its own", () => {
    const p = createAgentPolicy({ config: PINS_ONLY, log: () => undefined });
    p.observe(joined(0));
    const out = [
      ...p.observe(marked(1000, chainOf(8, 100n))),
      ...p.observe(marked(1001, chainOf(8, 900n))),
    ];
    expect(out).toHaveLength(2);
    expect(new Set(out.map((c) => c.id)).size).toBe(2);
  });
});

describe("the hold ledger keeps a command's id", () => {
  it("an unpin narrowed to the blocks its holds still name goes out under the policy's id", () => {
    let n = 0;
    const env: HoldEnv = {
      replica: "r1",
      now: 1,
      nextId: () => `h${++n}`,
      incarnation: () => null,
    };
    const r = newSessionRecord("s", 0);
    const pin: PolicyCommand = {
      worker: "w0",
      sessionId: "s",
      hold: "marker",
      reason: "x",
      id: "pin-1",
      command: { type: "Cache", block_hashes: [1n, 2n], pin: true, ttl_seconds: 60 },
    };
    settleHold(r, prepareHold(r, pin, env).effect, { status: "applied" }, 1);
    const unpin: PolicyCommand = {
      worker: "w0",
      sessionId: "s",
      hold: "marker",
      reason: "x",
      id: "unpin-1",
      command: { type: "Cache", block_hashes: [2n, 9n], pin: false },
    };
    const out = prepareHold(r, unpin, env);
    expect([out.pc?.id, out.pc?.command]).toEqual([
      "unpin-1",
      { type: "Cache", block_hashes: [2n], pin: false },
    ]);
    expect(r.releases?.map((e) => e.id)).toEqual(["unpin-1"]);
  });
});

describe("against a real SGLang server", () => {
  const KEY = "tenant-a-key-0123456789";
  const CAP = 3;
  let nats: NatsServer;
  let jsDir: string;
  let server: SglangServer;
  let nc: NatsConnection;
  let g: Gateway;
  let policy: AgentPolicy;
  const emitted: PolicyCommand[] = [];
  const decisions: Record<string, unknown>[] = [];

  beforeAll(async () => {
    jsDir = mkdtempSync(join(tmpdir(), "kvctl-command-ids-"));
    nats = await startNatsServer(["-js", "-sd", jsDir]);
    nc = await connect({ servers: nats.url });
    server = await startSglangServer({
      natsUrl: nats.url,
      workerId: "w0",
      storageDir: "",
      maxTotalTokens: 2048,
      hostRatio: 2,
      readyTimeoutS: 540,
      extraArgs: ["--enable-cache-report"],
    });
    g = await createGateway({
      config: {
        listen: { host: "127.0.0.1", port: 0 },
        workers: [{ id: "w0", url: server.baseUrl }],
        nats: { url: nats.url, opTimeoutMs: 5000 },
        // No periodic Inspect: only the acks may bring the view to what the worker holds.
        sessions: { bucket: "command_ids", idleAfterSeconds: 0, inspectMs: 0 },
        health: { intervalMs: 60_000, timeoutMs: 15_000, failures: 3 },
        auth: { tenants: [{ id: "a", keys: [hashKey(KEY)], maxPinnedBlocks: CAP }] },
        jsonLog: true,
      },
      // The agent policy without the tenants' caps: what it pins past them is the gateway's
      // backstop's to trim, as it trims a pin another replica's holds leave no room for.
      policy: (env): GatewayPolicy => {
        policy = createAgentPolicy({
          config: env.config,
          registry: env.registry,
          log: env.log,
          decisionLog: env.decisionLog,
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
      decisionLog: (l) => decisions.push(JSON.parse(l)),
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

  const SYSTEM_TEXT =
    "You are a careful agent. Think before acting, and keep every answer short. ".repeat(12);

  it("a pin the tenant's cap trimmed is acked to its rule as sent: the policy's view equals the worker's Inspect", async () => {
    const res = await fetch(`${g.url}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${KEY}`,
        "x-session-id": "s",
      },
      body: JSON.stringify({
        messages: [
          {
            role: "system",
            content: [
              { type: "text", text: SYSTEM_TEXT, cache_control: { type: "ephemeral", ttl: "1h" } },
            ],
          },
          { role: "user", content: "Hello." },
        ],
        max_tokens: 1,
        temperature: 0,
      }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const rec = await recordWhen(g, "a/s", (r) =>
      r.commands.some((c) => c.type === "Cache" && c.state === "applied"),
    );
    // The policy asked for more than the cap; the worker was sent the cap's worth, under the policy's id.
    const pin = emitted.find((c) => c.command.type === "Cache" && c.command.pin);
    expect(pin?.command.type === "Cache" && pin.command.block_hashes.length).toBeGreaterThan(CAP);
    const entry = rec.commands.find((c) => c.type === "Cache" && c.state === "applied");
    expect(entry?.id).toBe(pin?.id);
    expect(rec.pins.reduce((n, p) => n + p.blockHashes.length, 0)).toBe(CAP);
    expect(
      (await g.metrics.registry.metrics())
        .split("\n")
        .filter((l) => l.startsWith("kvctl_gateway_pin_cap_total{")),
    ).toEqual(['kvctl_gateway_pin_cap_total{tenant="a",outcome="trimmed"} 1']);
    // The rule heard the ack of what was sent: the blocks never sent left its view.
    expect(decisions.some((d) => d.policy === "cache_markers" && d.action === "cut")).toBe(true);
    const chain = rec.chain.map((h) => BigInt(h));
    const pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 0 });
    const inspect = (await pub.send("w0", { type: "Inspect", block_hashes: chain })) as {
      detail?: { blocks?: { block_hash: number | bigint; pin_count: number }[] };
    };
    const onWorker = new Map(
      (inspect.detail?.blocks ?? []).map((b) => [BigInt(b.block_hash), b.pin_count]),
    );
    const inView = (h: bigint) =>
      policy.state.budget.holdsAt("w0", h).filter((x) => x.kind !== "lease").length;
    expect(chain.map((h) => [String(h), inView(h)])).toEqual(
      chain.map((h) => [String(h), onWorker.get(h) ?? 0]),
    );
    expect(policy.state.budget.used("w0")).toBe(CAP);
    pub.close();
  }, 120_000);
});
