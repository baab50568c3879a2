// The agent policy inside the gateway over real HTTP and a real nats-server: prompt-cache markers
// pinned and released, explicit hints, and bad input (hints for unknown sessions, contradictory
// markers, tool results for a call never seen, a bad hint header, a worker acking `rejected`):
// each counted and logged, the request still served, the session record consistent. Two
// stand-ins (helpers/agent-policy-bed.ts): the HTTP upstream (a tiny node:http server whose
// "tokenizer" is the character codes of the messages' JSON, so the gateway's token positions are
// checkable) and the worker's control plane (ReferenceResponder). The real server's answers are
// tested in gateway-real-server.test.ts.
import { describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { PAGE, tokensOf, useAgentPolicyBed } from "./helpers/agent-policy-bed.js";
import { recordWhen } from "./helpers/poll.js";

const bed = useAgentPolicyBed("policy-http");
const logs: string[] = [];

const { responder } = bed;

async function gw(policies: Record<string, unknown> = {}): Promise<Gateway> {
  const g = await createGateway({ config: bed.config({ policies }), log: (l) => logs.push(l) });
  bed.gateways.push(g);
  return g;
}

const chat = (
  g: Gateway,
  session: string,
  messages: unknown[],
  headers: Record<string, string> = {},
) =>
  fetch(`${g.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-session-id": session, ...headers },
    body: JSON.stringify({ model: "tiny", messages }),
  });

const hint = (g: Gateway, session: string, body: unknown) =>
  fetch(`${g.url}/kvctl/v1/sessions/${encodeURIComponent(session)}/events`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

async function metric(g: Gateway, name: string): Promise<string[]> {
  const text = await (await fetch(`${g.url}/metrics`)).text();
  return text.split("\n").filter((l) => l.startsWith(name));
}

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

describe("agent policy in the gateway", () => {
  it("a marker pins the blocks up to it; the worker's partial ack is recorded; close releases the pins", async () => {
    const msgs = [SYSTEM, { role: "user", content: "hello there" }];
    const r = await responder(2, msgs);
    const g = await gw();
    const res = await chat(g, "m1", msgs);
    expect(res.status).toBe(200);
    const rec = await recordWhen(g, "m1", (x) => x.commands.length > 0);
    // The prefix up to the system message is every token its JSON shares with the whole prompt's.
    const sysTokens = tokensOf([SYSTEM]);
    const blocks = Math.floor((sysTokens.length - 1) / PAGE);
    const pin = r.received.find((x) => x.command?.type === "Cache")?.command;
    expect(pin).toMatchObject({ type: "Cache", pin: true, ttl_seconds: 3600 });
    expect(pin?.type === "Cache" && pin.block_hashes.length).toBe(blocks);
    expect(rec.commands[0]).toMatchObject({
      type: "Cache",
      state: "partial",
      reason: `marker: ${blocks} blocks for 3600s`,
    });
    expect(rec.pins).toHaveLength(1);
    expect((await hint(g, "m1", { event: "close" })).status).toBe(202);
    const after = await recordWhen(g, "m1", (x) => x.pins.length === 0);
    expect(
      after.commands.find((c) => c.type === "Cache" && c.reason === "session closed"),
    ).toMatchObject({ state: "applied" });
    // The view kept what the worker pinned (its budget is 2 blocks): exactly those are released.
    const unpin = r.received.find((x) => x.command?.type === "Cache" && !x.command.pin)?.command;
    expect(unpin).toEqual({
      type: "Cache",
      block_hashes: pin?.type === "Cache" ? pin.block_hashes.slice(0, 2) : [],
      pin: false,
    });
  }, 60_000);

  it("bad input is counted and logged; every request is still served; the record stays consistent", async () => {
    const first = [{ role: "user", content: "hi" }];
    let r = await responder(1000, first);
    const g = await gw({ idle: { enabled: true } });
    // Hints for a session nobody has, and a hint body with a bad field.
    expect((await hint(g, "ghost", { event: "close" })).status).toBe(404);
    const bad = await hint(g, "ghost", { event: "nap" });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe("event");
    // Five breakpoints: served, counted, nothing pinned.
    const cc = { type: "ephemeral" };
    const five = Array.from({ length: 5 }, (_, i) => ({
      role: "user",
      content: [{ type: "text", text: `m${i}`, cache_control: cc }],
    }));
    expect((await chat(g, "b1", five)).status).toBe(200);
    // A bad hint header: served, counted.
    expect((await chat(g, "b1", first, { "x-kvctl-hint": "nap" })).status).toBe(200);
    // Tool results answering a call this gateway never saw: served, counted.
    expect(
      (await chat(g, "b2", [...first, { role: "tool", tool_call_id: "never", content: "42" }]))
        .status,
    ).toBe(200);
    await g.settled();
    expect(await metric(g, "kvctl_gateway_hints_total")).toEqual(
      expect.arrayContaining([
        'kvctl_gateway_hints_total{event="close",outcome="unknown_session"} 1',
        'kvctl_gateway_hints_total{event="?",outcome="invalid"} 1',
        'kvctl_gateway_hints_total{event="header",outcome="invalid"} 1',
      ]),
    );
    expect(await metric(g, "kvctl_policy_bad_input_total")).toEqual(
      expect.arrayContaining([
        'kvctl_policy_bad_input_total{kind="markers"} 1',
        'kvctl_policy_bad_input_total{kind="tool_result_unknown_call"} 1',
      ]),
    );
    expect(r.received.filter((x) => x.command?.type === "Cache")).toEqual([]);
    expect(logs.some((l) => l.includes("more than 4 cache_control breakpoints (5)"))).toBe(true);

    // A lease the worker forgets (it restarted): RenewLease is rejected - logged, counted, served, and the record drops the lease.
    expect((await chat(g, "l1", first)).status).toBe(200);
    await g.settled();
    expect((await hint(g, "l1", { event: "idle" })).status).toBe(202);
    const paused = await recordWhen(g, "l1", (x) => x.leases.length === 1);
    expect(paused.commands.at(-1)).toMatchObject({ type: "Pause", state: "applied" });
    r.stop();
    r = await responder(1000, first);
    expect(
      (
        await chat(g, "l1", [
          ...first,
          { role: "assistant", content: "ok" },
          { role: "user", content: "again" },
        ])
      ).status,
    ).toBe(200);
    const rec = await recordWhen(g, "l1", (x) => x.commands.some((c) => c.type === "RenewLease"));
    expect(rec.commands.find((c) => c.type === "RenewLease")).toMatchObject({ state: "rejected" });
    expect(rec.leases).toEqual([]);
    expect(rec.turnCount).toBe(2);
    expect(await metric(g, "kvctl_policy_acks_total")).toContain(
      'kvctl_policy_acks_total{policy="idle",type="RenewLease",status="rejected"} 1',
    );
    expect(logs.some((l) => l.includes("idle RenewLease to w0 came back rejected"))).toBe(true);
  }, 60_000);

  it("a tool call offloaded with ToolStart comes back with ToolEnd carrying the worker's epoch; the record follows", async () => {
    const first = [{ role: "user", content: "call a tool" }];
    const r = await responder(1000, first);
    const g = await gw({ tools: { priorMeanSeconds: 3600, tauCandidatesSeconds: [1] } });
    expect((await chat(g, "t1", first)).status).toBe(200);
    const started = await recordWhen(g, "t1", (x) => x.tool !== null);
    expect(started.commands.at(-1)).toMatchObject({ type: "ToolStart", state: "applied" });
    const epoch = started.tool?.epoch;
    expect(typeof epoch).toBe("number");
    const back = [
      ...first,
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "search", arguments: "{}" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "42" },
    ];
    expect((await chat(g, "t1", back)).status).toBe(200);
    const ended = await recordWhen(g, "t1", (x) => x.tool === null);
    expect(ended.commands.find((c) => c.type === "ToolEnd")).toMatchObject({ state: "applied" });
    expect(r.received.find((x) => x.command?.type === "ToolEnd")?.command).toEqual({
      type: "ToolEnd",
      session_id: "t1",
      epoch,
    });
    expect(await metric(g, "kvctl_policy_tool_wait_seconds_count")).toEqual([
      'kvctl_policy_tool_wait_seconds_count{kind="predicted"} 1',
      'kvctl_policy_tool_wait_seconds_count{kind="actual"} 1',
    ]);
  }, 60_000);
});
