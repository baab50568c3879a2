// The agent policies on a fake clock with no network: each rule from observations to commands,
// the pin-budget view, the guards, and bad input (counted, nothing half-applied).
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createAgentPolicy, type AgentPolicyOptions } from "../src/policy/agent-policy.js";
import { parseHintBody, parseHintHeader, HintError } from "../src/gateway/request/hints.js";
import { parseCacheMarkers, prefixTokenizeRequest } from "../src/gateway/request/markers.js";
import { promptTailOf } from "../src/gateway/request/prompt-tail.js";
import { DurationModel, bestKeep } from "../src/policy/duration-model.js";
import { CommandGuards } from "../src/policy/guards.js";
import { storageKeys } from "../src/hash/index.js";
import { parseGatewayConfig } from "../src/gateway/config/load.js";
import type { Observation } from "../src/contract/observations.js";
import {
  ack,
  chainOf,
  cmd,
  finished,
  joined,
  PAGE,
  started,
  tail,
  types,
} from "./helpers/policy-observations.js";

function policy(
  config: AgentPolicyOptions["config"] = {},
  extra: Partial<AgentPolicyOptions> = {},
) {
  const registry = new Registry();
  const logs: string[] = [];
  const decisions: string[] = [];
  const p = createAgentPolicy({
    config,
    registry,
    log: (l) => logs.push(l),
    decisionLog: (l) => decisions.push(l),
    ...extra,
  });
  p.observe(joined(0));
  const metric = async (name: string) =>
    (await registry.metrics()).split("\n").filter((l) => l.startsWith(name));
  return { p, logs, decisions, metric };
}

const TTLS = { inMemoryTtlSeconds: 600, longTtlSeconds: 86_400 };
const ONLY = (name: string) =>
  Object.fromEntries(
    ["pins", "inflight", "tools", "think", "idle", "prune", "warm"].map((k) => [
      k,
      { enabled: k === name },
    ]),
  );

describe("prompt-cache markers", () => {
  it("finds Anthropic breakpoints in prefix order and OpenAI retention", () => {
    const body = {
      tools: [{ name: "a" }, { name: "b", cache_control: { type: "ephemeral", ttl: "1h" } }],
      system: [{ type: "text", text: "sys", cache_control: { type: "ephemeral", ttl: "1h" } }],
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }],
        },
      ],
    };
    expect(parseCacheMarkers("messages", body, TTLS)).toEqual({
      specs: [
        { at: "tools[1]", ttlSeconds: 3600, messages: 0 },
        { at: "system", ttlSeconds: 3600, messages: 0 },
        { at: "message[0]", ttlSeconds: 300, messages: 1 },
      ],
      errors: [],
    });
    expect(
      parseCacheMarkers("chat", { messages: [], prompt_cache_retention: "24h" }, TTLS)?.specs,
    ).toEqual([{ at: "prompt_cache_retention", ttlSeconds: 86_400, messages: null }]);
    expect(
      parseCacheMarkers("chat", { messages: [], prompt_cache_retention: "in_memory" }, TTLS)
        ?.specs[0].ttlSeconds,
    ).toBe(600);
    expect(
      parseCacheMarkers("chat", { messages: [{ role: "user", content: "x" }] }, TTLS),
    ).toBeNull();
    expect(
      parseCacheMarkers("generate", { cache_control: { type: "ephemeral" } }, TTLS),
    ).toBeNull();
  });

  it("more than 4 breakpoints, a TTL order violation, a bad TTL or retention: errors naming them, no specs", () => {
    const cc = { type: "ephemeral" };
    const five = {
      messages: Array.from({ length: 5 }, () => ({
        role: "user",
        content: "x",
        cache_control: cc,
      })),
    };
    expect(parseCacheMarkers("chat", five, TTLS)).toEqual({
      specs: [],
      errors: ["more than 4 cache_control breakpoints (5)"],
    });
    const order = {
      messages: [
        { role: "system", content: "s", cache_control: cc },
        { role: "user", content: "u", cache_control: { type: "ephemeral", ttl: "1h" } },
      ],
    };
    const r = parseCacheMarkers("chat", order, TTLS);
    expect(r?.specs).toEqual([]);
    expect(r?.errors[0]).toMatch(
      /TTL order: the 3600s breakpoint at message\[1\] follows a shorter 300s one at message\[0\]/,
    );
    expect(
      parseCacheMarkers(
        "chat",
        {
          messages: [
            { role: "user", content: "u", cache_control: { type: "ephemeral", ttl: "2h" } },
          ],
        },
        TTLS,
      )?.errors,
    ).toEqual(['messages[0].cache_control.ttl must be "5m" or "1h" (got "2h")']);
    expect(
      parseCacheMarkers("chat", { messages: [], prompt_cache_retention: "forever" }, TTLS)
        ?.errors[0],
    ).toMatch(/prompt_cache_retention must be/);
  });

  it("renders the prefix up to a marker for the worker's tokenizer", () => {
    const body = {
      model: "m",
      tools: [{ type: "function" }],
      messages: [
        { role: "system", content: "s" },
        { role: "user", content: "u" },
        { role: "assistant", content: "a" },
      ],
    };
    expect(
      prefixTokenizeRequest("chat", body, { at: "tools[0]", ttlSeconds: 3600, messages: 0 }),
    ).toEqual({
      add_generation_prompt: false,
      model: "m",
      tools: body.tools,
      messages: [body.messages[0]],
    });
    expect(
      prefixTokenizeRequest("chat", body, { at: "message[1]", ttlSeconds: 300, messages: 2 })
        ?.messages,
    ).toEqual(body.messages.slice(0, 2));
    const anth = {
      system: "S",
      messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }],
    };
    expect(
      prefixTokenizeRequest("messages", anth, { at: "message[0]", ttlSeconds: 300, messages: 1 })
        ?.messages,
    ).toEqual([
      { role: "system", content: "S" },
      { role: "user", content: "hi" },
    ]);
  });
});

describe("hints and prompt tails", () => {
  it("parses the events body and the header; bad input names the field", () => {
    expect(parseHintBody({ event: "tool_end", tool_call_id: "c1" }, "s", 5)).toEqual({
      type: "SessionHint",
      at: 5,
      sessionId: "s",
      event: "tool_end",
      toolName: null,
      toolCallId: "c1",
      keepTokens: null,
    });
    expect(
      parseHintHeader("tool_end;call=c1, rewrite;keep_tokens=8", "s", 1).map((h) => [
        h.event,
        h.toolCallId,
        h.keepTokens,
      ]),
    ).toEqual([
      ["tool_end", "c1", null],
      ["rewrite", null, 8],
    ]);
    expect(() => parseHintBody({ event: "nap" }, "s", 0)).toThrow(/event/);
    expect(() => parseHintBody({ event: "close", extra: 1 }, "s", 0)).toThrow(HintError);
    expect(() => parseHintHeader("close;who=me", "s", 0)).toThrow(/unknown key 'who=me'/);
    expect(() => parseHintHeader("rewrite;keep_tokens=-1", "s", 0)).toThrow(/keep_tokens/);
  });

  it("tells a user turn from tool results coming back (OpenAI and Anthropic)", () => {
    expect(
      promptTailOf("chat", {
        messages: [
          { role: "assistant" },
          { role: "tool", tool_call_id: "a" },
          { role: "tool", tool_call_id: "b" },
        ],
      }),
    ).toEqual({ role: "tool", toolCallIds: ["a", "b"] });
    expect(promptTailOf("chat", { messages: [{ role: "user", content: "x" }] })).toEqual({
      role: "user",
      toolCallIds: [],
    });
    expect(
      promptTailOf("messages", {
        messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t1" }] }],
      }),
    ).toEqual({ role: "tool", toolCallIds: ["t1"] });
  });
});

describe("pins from markers", () => {
  const bp = (tokens: number, ttl: number, at = "message[0]") => ({ tokens, ttlSeconds: ttl, at });

  it("pins up to each breakpoint with its TTL (longest first), refreshes on a hit past half the TTL, releases on close", async () => {
    const { p, metric } = policy(ONLY("pins"));
    const chain = chainOf(10);
    const out = p.observe(
      finished(1000, "s", chain, {
        promptBlocks: 8,
        markers: { breakpoints: [bp(3 * PAGE + 1, 3600, "system"), bp(6 * PAGE, 300)], errors: [] },
      }),
    );
    expect(out.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain.slice(0, 3), pin: true, ttl_seconds: 3600 },
      { type: "Cache", block_hashes: chain.slice(3, 6), pin: true, ttl_seconds: 300 },
    ]);
    expect(await metric("kvctl_policy_pin_budget_used_blocks")).toEqual([
      'kvctl_policy_pin_budget_used_blocks{worker="w0"} 6',
    ]);
    // A hit 100 s later: nothing is below half its TTL yet.
    expect(p.observe(finished(101_000, "s", chain, { promptBlocks: 8 }))).toEqual([]);
    // 200 s later the 5m pins are (300 - 200 < 150 s left): re-pinned; the 1h ones are fresh.
    const again = p.observe(finished(201_000, "s", chain, { promptBlocks: 8 }));
    expect(again.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain.slice(3, 6), pin: true, ttl_seconds: 300 },
    ]);
    expect(again[0].reason).toMatch(/^refresh on hit/);
    // Close: one unpin per hold (blocks 3-5 hold two).
    const close = p.observe({
      type: "SessionHint",
      at: 202_000,
      sessionId: "s",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(close.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain.slice(0, 6), pin: false },
      { type: "Cache", block_hashes: chain.slice(3, 6), pin: false },
    ]);
    expect(p.state.budget.used("w0")).toBe(0);
  });

  it("expired holds free the budget on the fake clock without any message", () => {
    const { p } = policy(ONLY("pins"));
    p.observe(
      finished(0, "s", chainOf(4), { markers: { breakpoints: [bp(16, 300)], errors: [] } }),
    );
    expect(p.state.budget.used("w0")).toBe(4);
    p.observe(joined(300_001));
    expect(p.state.budget.used("w0")).toBe(0);
  });

  it("never asks for more than the budget; shared blocks count once; a partial ack marks the worker full", async () => {
    const { p, metric } = policy({ ...ONLY("pins"), pins: { enabled: true, budgetBlocks: 5 } });
    const shared = chainOf(3, 1n);
    const a = p.observe(
      finished(0, "a", [...shared, 10n, 11n], {
        markers: { breakpoints: [bp(20, 300)], errors: [] },
      }),
    );
    expect(a.map((c) => c.command.type === "Cache" && c.command.block_hashes.length)).toEqual([5]);
    // Session b shares the first 3 blocks: they cost nothing, its own 2 do not fit.
    const b = p.observe(
      finished(1, "b", [...shared, 20n, 21n], {
        markers: { breakpoints: [bp(20, 300)], errors: [] },
      }),
    );
    expect(b.map((c) => (c.command.type === "Cache" ? c.command.block_hashes : null))).toEqual([
      shared,
    ]);
    expect(p.state.budget.used("w0")).toBe(5);
    expect(await metric("kvctl_policy_pin_budget_peak_blocks")).toEqual([
      'kvctl_policy_pin_budget_peak_blocks{worker="w0"} 5',
    ]);
    expect(
      (await metric("kvctl_policy_decisions_total")).some((l) => l.includes('reason="pin budget"')),
    ).toBe(true);
    // The worker pins fewer than asked (its budget is smaller): only the acked part stays in the view.
    p.observe(ack(2, a[0], "partial", { affected: 2, detail: "pin budget exhausted" }));
    expect(p.state.budget.used("w0")).toBe(3);
    const c = p.observe(
      finished(3, "c", [50n, 51n], { markers: { breakpoints: [bp(8, 300)], errors: [] } }),
    );
    expect(c).toEqual([]);
  });

  it("pins the worker no longer holds (found by its Inspect) are not adopted again from the session record: the view follows the worker and stays within the budget", async () => {
    const { p, metric } = policy({ ...ONLY("pins"), pins: { enabled: true, budgetBlocks: 10 } });
    const mine = chainOf(6, 100n);
    p.observe(
      finished(0, "s", mine, { markers: { breakpoints: [bp(6 * PAGE, 3600)], errors: [] } }),
    );
    expect(p.state.budget.used("w0")).toBe(6);
    // The worker's Inspect, long after the pins were taken: it holds none of them (Think or Prune took the blocks).
    p.observe({
      type: "WorkerPins",
      at: 10_000,
      worker: "w0",
      pins: new Map(mine.map((h) => [h, 0])),
    });
    expect(p.state.budget.used("w0")).toBe(0);
    // The freed budget goes to another session.
    p.observe(
      finished(11_000, "t", chainOf(8, 500n), {
        markers: { breakpoints: [bp(8 * PAGE, 3600)], errors: [] },
      }),
    );
    expect(p.state.budget.used("w0")).toBe(8);
    // s comes back: the record still names its pins (records drop holds on release or expiry only).
    const stored = {
      worker: "w0",
      pins: [
        { worker: "w0", kind: "marker", blockHashes: mine.map(String), ttlSeconds: 3600, atMs: 0 },
      ],
      leases: [],
      tool: null,
    };
    p.observe(started(20_000, "s", { stored }));
    expect(p.state.budget.used("w0")).toBe(8);
    // A pin the record names that the view never dropped is still adopted (another replica took it).
    const other = chainOf(2, 900n);
    p.observe(
      started(21_000, "s", {
        stored: {
          ...stored,
          pins: [
            ...stored.pins,
            {
              worker: "w0",
              kind: "marker",
              blockHashes: other.map(String),
              ttlSeconds: 3600,
              atMs: 20_500,
            },
          ],
        },
      }),
    );
    expect(p.state.budget.used("w0")).toBe(10);
    expect(await metric("kvctl_policy_pin_budget_peak_blocks")).toEqual([
      'kvctl_policy_pin_budget_peak_blocks{worker="w0"} 10',
    ]);
  });

  it("a record read before this replica's own write (a hold just taken, or just released) changes nothing in the view", () => {
    const { p } = policy({ ...ONLY("pins"), pins: { enabled: true, budgetBlocks: 10 } });
    const mine = chainOf(6, 100n);
    const marker = { breakpoints: [bp(6 * PAGE, 3600)], errors: [] };
    p.observe(finished(0, "s", mine, { markers: marker }));
    // The next turn's record was read before the ledger wrote the pin: the pin stays in the view.
    p.observe(started(100, "s", { stored: { worker: "w0", pins: [], leases: [], tool: null } }));
    expect(p.state.budget.used("w0")).toBe(6);
    // Long after, a record without it says it went (closed on another replica): it leaves the view.
    p.observe(started(10_000, "s", { stored: { worker: "w0", pins: [], leases: [], tool: null } }));
    expect(p.state.budget.used("w0")).toBe(0);
    // Released here (the session closed), then a record read before that release still names it:
    // not adopted back.
    p.observe(finished(20_000, "u", mine, { markers: marker }));
    p.observe({
      type: "SessionHint",
      at: 20_100,
      sessionId: "u",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    const stale = {
      worker: "w0",
      pins: [
        {
          worker: "w0",
          kind: "marker",
          blockHashes: mine.map(String),
          ttlSeconds: 3600,
          atMs: 20_000,
        },
      ],
      leases: [],
      tool: null,
    };
    p.observe(started(20_200, "u", { stored: stale }));
    expect(p.state.budget.used("w0")).toBe(0);
  });

  it("a tenant's caps bind before the budget: per session and over the tenant's sessions, counted in distinct blocks; other tenants are not affected", async () => {
    const caps = (t: string) => (t === "a" ? { perSession: 4, perTenant: 6 } : null);
    const { p, decisions } = policy(ONLY("pins"), { tenantCaps: caps });
    const marker = (n: number) => ({ breakpoints: [bp(n * PAGE, 3600)], errors: [] });
    const pinned = (out: ReturnType<typeof p.observe>) =>
      out.map((c) => (c.command.type === "Cache" ? c.command.block_hashes.length : 0));
    p.observe(started(0, "s1", { tenant: "a" }));
    expect(pinned(p.observe(finished(10, "s1", chainOf(6, 100n), { markers: marker(6) })))).toEqual(
      [4],
    );
    p.observe(started(20, "s2", { tenant: "a" }));
    expect(pinned(p.observe(finished(30, "s2", chainOf(6, 200n), { markers: marker(6) })))).toEqual(
      [2],
    );
    p.observe(started(40, "s3", { tenant: "b" }));
    expect(pinned(p.observe(finished(50, "s3", chainOf(6, 300n), { markers: marker(6) })))).toEqual(
      [6],
    );
    // The view holds what was asked, no more: the gateway's own check has nothing left to cut.
    expect(p.state.budget.used("w0")).toBe(12);
    expect(decisions.some((l) => l.includes("tenant cap (tenant a)"))).toBe(true);
    // A refresh of blocks s1 holds costs its caps nothing more: re-pinned past half the TTL.
    expect(
      pinned(p.observe(finished(2_000_000, "s1", chainOf(6, 100n), { markers: marker(6) }))),
    ).toEqual([4]);
  });

  it("a tool keep over the session's tenant cap is refused whole and preempts nothing", () => {
    const { p, decisions } = policy(
      { ...ONLY("tools"), pins: { enabled: false, budgetBlocks: 100 } },
      { tenantCaps: () => ({ perSession: 5, perTenant: null }) },
    );
    p.observe(started(0, "s", { tenant: "a" }));
    const out = p.observe(
      finished(10, "s", chainOf(8), {
        finishReason: "tool_calls",
        toolCalls: [{ id: "c1", name: "search" }],
      }),
    );
    expect(out).toEqual([]);
    expect(p.state.budget.used("w0")).toBe(0);
    expect(decisions.some((l) => l.includes("session cap: 0 + 8 blocks over 5"))).toBe(true);
  });

  it("a partial ack for blocks the worker no longer had releases those and does not mark the worker full", () => {
    const { p } = policy({ ...ONLY("pins"), pins: { enabled: true, budgetBlocks: 8 } });
    const chain = chainOf(4, 1n);
    const a = p.observe(
      finished(0, "a", chain, { markers: { breakpoints: [bp(16, 300)], errors: [] } }),
    );
    p.observe(ack(1, a[0], "partial", { affected: 3, missing: [chain[0]], skipped: 0 }));
    expect(p.state.budget.used("w0")).toBe(3);
    const c = p.observe(
      finished(2, "c", chainOf(2, 50n), { markers: { breakpoints: [bp(8, 300)], errors: [] } }),
    );
    expect(
      c.map((x) => (x.command.type === "Cache" ? x.command.block_hashes.length : null)),
    ).toEqual([2]);
  });

  it("a rejected pin leaves no hold; contradictory markers change nothing and are counted", async () => {
    const { p, metric, logs } = policy(ONLY("pins"));
    const out = p.observe(
      finished(0, "s", chainOf(4), { markers: { breakpoints: [bp(16, 300)], errors: [] } }),
    );
    p.observe(ack(1, out[0], "rejected", { detail: "command.block_hashes: too many" }));
    expect(p.state.budget.used("w0")).toBe(0);
    expect(await metric("kvctl_policy_acks_total")).toEqual([
      'kvctl_policy_acks_total{policy="cache_markers",type="Cache",status="rejected"} 1',
    ]);
    expect(logs.some((l) => l.includes("came back rejected: command.block_hashes: too many"))).toBe(
      true,
    );
    expect(
      p.observe(
        finished(2, "s", chainOf(4), {
          markers: { breakpoints: [], errors: ["more than 4 cache_control breakpoints (5)"] },
        }),
      ),
    ).toEqual([]);
    expect(await metric("kvctl_policy_bad_input_total")).toEqual([
      'kvctl_policy_bad_input_total{kind="markers"} 1',
    ]);
  });
});

describe("tool calls: keep or offload", () => {
  const toolTurn = (at: number, sid: string, chain: bigint[], name = "search", id = "c1") =>
    finished(at, sid, chain, { finishReason: "tool_calls", toolCalls: [{ id, name }] });

  it("the duration model: exponential prior, then the empirical CDF; the best tau maximizes the net benefit", () => {
    const m = new DurationModel({
      priorMeanSeconds: 5,
      minSamples: 4,
      maxSamples: 10,
      maxTools: 4,
    });
    expect(m.cdf("t", 5)).toBeCloseTo(1 - Math.exp(-1));
    for (const d of [1, 1, 2, 40]) m.record("t", d);
    expect(m.cdf("t", 2)).toBe(0.75);
    expect(m.median("t")).toBe(2);
    const k = bestKeep(m, ["t"], 10, 1, [1, 2, 60], 0.01);
    expect(k.tauSeconds).toBe(2);
    expect(k.net).toBeGreaterThan(0);
    expect(bestKeep(m, ["t"], 10, 1, [1, 2, 60], 1).net).toBeLessThanOrEqual(0);
  });

  it("the empirical CDF counts the samples at or under t, through records that roll the window over", () => {
    const m = new DurationModel({ priorMeanSeconds: 5, minSamples: 3, maxSamples: 7, maxTools: 4 });
    const kept: number[] = [];
    for (let i = 0; i < 40; i++) {
      const d = ((i * 37) % 11) / 2;
      m.record("t", d);
      kept.push(d);
      if (kept.length > 7) kept.shift();
      if (kept.length < 3) continue;
      for (const t of [-1, 0, 0.5, 1, 2.5, 3, 5, 100])
        expect(m.cdf("t", t)).toBe(kept.filter((x) => x <= t).length / kept.length);
    }
  });

  it("a short expected wait keeps the blocks resident (pin with TTL tau); the tool results feed the distribution, their request's end unpins", async () => {
    const { p, metric, decisions } = policy(ONLY("tools"));
    const chain = chainOf(8);
    const out = p.observe(toolTurn(0, "s", chain));
    expect(types(out)).toEqual(["Cache"]);
    const pin = cmd(out, "Cache");
    expect(pin).toMatchObject({ pin: true, block_hashes: chain });
    expect(p.state.cfg.tools.tauCandidatesSeconds).toContain(pin.ttl_seconds);
    expect(out[0].reason).toMatch(/^keep \(finish_reason tool_calls\): P\(<=\d+s\)=/);
    expect(p.observe(started(3_000, "s", { tail: tail("tool", ["c1"]) }))).toEqual([]);
    expect(
      p.observe(finished(3_500, "s", chain, { requestId: "r3000" })).map((c) => c.command),
    ).toEqual([{ type: "Cache", block_hashes: chain, pin: false }]);
    expect(p.durations.count("search")).toBe(1);
    expect(await metric("kvctl_policy_tool_wait_seconds_count")).toEqual([
      'kvctl_policy_tool_wait_seconds_count{kind="predicted"} 1',
      'kvctl_policy_tool_wait_seconds_count{kind="actual"} 1',
    ]);
    expect(decisions.some((l) => l.includes('"actual_s":3'))).toBe(true);
  });

  it("keep: the tool results' request records the actual duration as it starts; the unpin and the budget release wait for its end", async () => {
    const { p, metric, decisions } = policy(ONLY("tools"));
    const chain = chainOf(8);
    p.observe(toolTurn(0, "s", chain));
    expect(p.state.budget.usedBy("w0", "tool")).toBe(8);
    // The results arrive: the wait is over and timed, the blocks stay pinned while it is queued.
    expect(p.observe(started(2_000, "s", { requestId: "q2", tail: tail("tool", ["c1"]) }))).toEqual(
      [],
    );
    expect(p.durations.count("search")).toBe(1);
    expect(await metric("kvctl_policy_tool_wait_seconds_count")).toContain(
      'kvctl_policy_tool_wait_seconds_count{kind="actual"} 1',
    );
    expect(decisions.some((l) => l.includes('"actual_s":2'))).toBe(true);
    expect(p.state.sessions.get("s")?.tool).toBeNull();
    expect(p.state.budget.usedBy("w0", "tool")).toBe(8);
    // Another request's end is not the one the pin stays for.
    expect(p.observe(finished(3_000, "s", chain, { requestId: "elsewhere" }))).toEqual([]);
    expect(p.state.budget.usedBy("w0", "tool")).toBe(8);
    const done = p.observe(finished(4_000, "s", [...chain, 2000n], { requestId: "q2" }));
    expect(done.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain, pin: false },
    ]);
    expect(done[0].reason).toBe("tool results served (200): unpin");
    expect(p.state.budget.used("w0")).toBe(0);
    // Released once: a second report of that end sends nothing.
    expect(p.observe(finished(4_001, "s", [...chain, 2000n], { requestId: "q2" }))).toEqual([]);
    expect(p.durations.count("search")).toBe(1);
  });

  it("keep: the pinned blocks the tool results' request was served from count as hit, not wasted", async () => {
    const { p, metric } = policy(ONLY("tools"));
    const chain = chainOf(8);
    p.observe(toolTurn(0, "s", chain));
    p.observe(started(1_000, "s", { requestId: "q2", tail: tail("tool", ["c1"]) }));
    expect(await metric("kvctl_policy_pinned_blocks_open")).toEqual([
      'kvctl_policy_pinned_blocks_open{kind="tool",outcome="wasted"} 8',
    ]);
    // Served with 6 of the 8 kept blocks from cache: those 6 paid off, the other 2 were held for nothing.
    const usage = { promptTokens: 10 * PAGE, completionTokens: 1, cachedTokens: 6 * PAGE + 1 };
    p.observe(finished(2_000, "s", [...chain, 2000n, 2001n], { requestId: "q2", usage }));
    expect(await metric("kvctl_policy_pinned_blocks_total")).toEqual([
      'kvctl_policy_pinned_blocks_total{kind="tool",outcome="hit"} 6',
      'kvctl_policy_pinned_blocks_total{kind="tool",outcome="wasted"} 2',
    ]);
    expect(await metric("kvctl_policy_pinned_blocks_open")).toEqual([]);
    // With the request's own prefix hold beside it, that hold goes first: the keep is the blocks'
    // last hold, and what they were served from counts for it.
    const both = policy({ ...ONLY("tools"), inflight: { enabled: true } });
    both.p.observe(toolTurn(0, "s", chain));
    const q = both.p.observe(
      started(1_000, "s", {
        requestId: "q2",
        tail: tail("tool", ["c1"]),
        promptBlocks: [...chain, 2000n],
        overlap: { GPU: 8, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 },
      }),
    );
    expect(q.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain, pin: true, ttl_seconds: 120 },
    ]);
    const end = both.p.observe(
      finished(2_000, "s", [...chain, 2000n, 2001n], {
        requestId: "q2",
        usage: { ...usage, cachedTokens: 8 * PAGE },
      }),
    );
    expect(end.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain, pin: false },
      { type: "Cache", block_hashes: chain, pin: false },
    ]);
    expect(await both.metric("kvctl_policy_pinned_blocks_total")).toEqual([
      'kvctl_policy_pinned_blocks_total{kind="tool",outcome="hit"} 8',
    ]);
    expect(both.p.state.budget.used("w0")).toBe(0);
  });

  it("keep: a tool results' request that fails or is refused still unpins and releases at its end", async () => {
    const { p, metric } = policy(ONLY("tools"));
    const none = { promptTokens: null, completionTokens: null, cachedTokens: null };
    const a = chainOf(8, 1000n);
    const b = chainOf(4, 5000n);
    p.observe(toolTurn(0, "a", a));
    p.observe(toolTurn(0, "b", b));
    p.observe(started(1_000, "a", { requestId: "qa", tail: tail("tool", ["c1"]) }));
    p.observe(started(1_000, "b", { requestId: "qb", tail: tail("tool", ["c1"]) }));
    const failed = p.observe(
      finished(2_000, "a", [], {
        requestId: "qa",
        status: 0,
        error: "worker failed",
        usage: none,
        finishReason: null,
      }),
    );
    expect(failed.map((c) => c.command)).toEqual([{ type: "Cache", block_hashes: a, pin: false }]);
    expect(failed[0].reason).toBe("tool results served (worker failed): unpin");
    const refused = p.observe(
      finished(2_000, "b", [], { requestId: "qb", status: 429, usage: none, finishReason: null }),
    );
    expect(refused.map((c) => c.command)).toEqual([{ type: "Cache", block_hashes: b, pin: false }]);
    expect(p.state.budget.used("w0")).toBe(0);
    expect(await metric("kvctl_policy_pinned_blocks_total")).toEqual([
      'kvctl_policy_pinned_blocks_total{kind="tool",outcome="wasted"} 12',
    ]);
  });

  it("keep waiting for its request: a tool call in its response pins afresh after the unpin; a close unpins at once; a hold past its TTL or refused is not unpinned", () => {
    const { p } = policy(ONLY("tools"));
    const chain = chainOf(8);
    p.observe(toolTurn(0, "s", chain));
    p.observe(started(1_000, "s", { requestId: "q2", tail: tail("tool", ["c1"]) }));
    // The answer is the next tool call: the old keep goes first, and the new wait holds the
    // session's blocks once (no hold of the old wait left behind, none released twice).
    const next = [...chain, 2000n, 2001n];
    const out = p.observe(
      finished(2_000, "s", next, {
        requestId: "q2",
        finishReason: "tool_calls",
        toolCalls: [{ id: "c2", name: "search" }],
      }),
    );
    expect(out.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain, pin: false },
      { type: "Cache", block_hashes: next, pin: true, ttl_seconds: 300 },
    ]);
    expect(out[0].reason).toBe("tool results served (200): unpin");
    expect(p.state.budget.holdsOf("w0", "s", "tool").size).toBe(10);
    expect(
      [...p.state.budget.holdsOf("w0", "s", "tool").values()].every((l) => l.length === 1),
    ).toBe(true);
    // Its results arrive, then the session closes before that request ends: unpinned at the close,
    // and the request's end has nothing left to release.
    p.observe(started(3_000, "s", { requestId: "q4", tail: tail("tool", ["c2"]) }));
    const close = p.observe({
      type: "SessionHint",
      at: 3_500,
      sessionId: "s",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(close.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: next, pin: false },
    ]);
    expect(p.state.budget.used("w0")).toBe(0);
    expect(p.observe(finished(4_000, "s", next, { requestId: "q4" }))).toEqual([]);
    // A keep whose TTL runs out while its request is queued: the worker dropped the pin already.
    const short = policy({ ...ONLY("tools"), tools: { enabled: true, tauCandidatesSeconds: [5] } });
    expect(cmd(short.p.observe(toolTurn(0, "t", chain)), "Cache").ttl_seconds).toBe(5);
    expect(
      short.p.observe(started(1_000, "t", { requestId: "q2", tail: tail("tool", ["c1"]) })),
    ).toEqual([]);
    expect(short.p.observe(finished(6_000, "t", chain, { requestId: "q2" }))).toEqual([]);
    expect(short.p.state.budget.used("w0")).toBe(0);
    // A keep pin the worker refused, acked only after the results arrived: released from the view
    // once, and the request's end unpins nothing the worker never pinned.
    const late = policy(ONLY("tools"));
    const kept = late.p.observe(toolTurn(0, "u", chain));
    late.p.observe(started(1_000, "u", { requestId: "q2", tail: tail("tool", ["c1"]) }));
    late.p.observe(ack(1_100, kept[0], "rejected", { detail: "block_hashes: unknown" }));
    expect(late.p.state.budget.used("w0")).toBe(0);
    expect(late.p.observe(finished(2_000, "u", chain, { requestId: "q2" }))).toEqual([]);
  });

  it("a long expected wait offloads (ToolStart); ToolEnd carries the acked epoch", () => {
    const { p } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1, 5] },
    });
    const chain = chainOf(8);
    const out = p.observe(toolTurn(0, "s s", chain));
    const ts = cmd(out, "ToolStart");
    expect(ts.block_hashes).toEqual(chain);
    expect(ts.session_id).toMatch(/^sha-[0-9a-f]{40}$/); // "s s" has a space: not a wire id
    p.observe(ack(10, out[0], "applied", { epoch: 7 }));
    const back = p.observe(started(60_000, "s s", { tail: tail("tool", ["c1"]) }));
    expect(back.map((c) => c.command)).toEqual([
      { type: "ToolEnd", session_id: ts.session_id, epoch: 7 },
    ]);
  });

  it("tool results that arrive before ToolStart's ack: ToolEnd goes out with the epoch when the ack comes", () => {
    const { p } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1, 5] },
    });
    const out = p.observe(toolTurn(0, "s", chainOf(8)));
    const ts = cmd(out, "ToolStart");
    // The worker is busy: the next request (with the tool results) is here first.
    expect(p.observe(started(200, "s", { tail: tail("tool", ["c1"]) }))).toEqual([]);
    expect(p.durations.count("search")).toBe(1);
    const late = p.observe(ack(5_000, out[0], "partial", { epoch: 3 }));
    expect(late.map((c) => c.command)).toEqual([
      { type: "ToolEnd", session_id: ts.session_id, epoch: 3 },
    ]);
    // The wait is over: a later tool result sends nothing more; the next call starts a new wait
    // (kept: the 0.2 s return it learned from).
    expect(p.observe(started(6_000, "s", { tail: tail("tool", ["c1"]) }))).toEqual([]);
    expect(types(p.observe(toolTurn(7_000, "s", chainOf(8), "search", "c2")))).toEqual(["Cache"]);
  });

  it("a new tool call before a pending ToolEnd could go out supersedes it (the worker ends the old offload)", () => {
    const { p } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1] },
    });
    const first = p.observe(toolTurn(0, "s", chainOf(8)));
    p.observe(started(100, "s", { tail: tail("tool", ["c1"]) }));
    const second = p.observe(toolTurn(200, "s", chainOf(9), "slow_search", "c2"));
    expect(types(second)).toEqual(["ToolStart"]);
    // The first ack arriving now belongs to a wait that is gone: no ToolEnd for it.
    expect(p.observe(ack(300, first[0], "applied", { epoch: 1 }))).toEqual([]);
    p.observe(ack(310, second[0], "applied", { epoch: 2 }));
    expect(
      p.observe(started(400, "s", { tail: tail("tool", ["c2"]) })).map((c) => c.command),
    ).toEqual([{ type: "ToolEnd", session_id: "s", epoch: 2 }]);
  });

  it("keep and offload hold from the pin budget: a wait that does not fit holds nothing; an offload is counted until ToolEnd", async () => {
    const { p, metric } = policy({
      ...ONLY("tools"),
      pins: { enabled: false, budgetBlocks: 10 },
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1] },
    });
    expect(p.observe(toolTurn(0, "big", chainOf(12, 9000n)))).toEqual([]);
    expect(p.state.sessions.get("big")?.tool?.mode).toBe("none");
    const out = p.observe(toolTurn(1, "s", chainOf(8)));
    expect(types(out)).toEqual(["ToolStart"]);
    expect(p.state.budget.usedBy("w0", "tool")).toBe(8);
    p.observe(ack(2, out[0], "applied", { epoch: 1 }));
    expect(types(p.observe(started(3, "s", { tail: tail("tool", ["c1"]) })))).toEqual(["ToolEnd"]);
    expect(p.state.budget.used("w0")).toBe(0);
    // The wait that held nothing is still one: its results close it (no bad input) and its
    // duration is learned and recorded beside the prediction.
    expect(p.observe(started(4_000, "big", { tail: tail("tool", ["c1"]) }))).toEqual([]);
    expect(p.state.sessions.get("big")?.tool).toBeNull();
    expect(p.durations.count("search")).toBe(2);
    expect(await metric("kvctl_policy_bad_input_total")).toEqual([]);
    expect(await metric("kvctl_policy_tool_wait_seconds_count")).toEqual([
      'kvctl_policy_tool_wait_seconds_count{kind="predicted"} 2',
      'kvctl_policy_tool_wait_seconds_count{kind="actual"} 2',
    ]);
  });

  it("the distribution learns: after enough fast returns a tool that the prior would offload is kept", () => {
    const { p } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, minSamples: 3, tauCandidatesSeconds: [2, 5] },
    });
    const chain = chainOf(8);
    let t = 0;
    for (let i = 0; i < 3; i++) {
      const out = p.observe(toolTurn(t, "s", chain, "ls"));
      if (out[0].command.type === "ToolStart")
        p.observe(ack(t, out[0], "applied", { epoch: i + 1 }));
      p.observe(started(t + 1000, "s", { tail: tail("tool", ["c1"]) }));
      t += 10_000;
    }
    expect(types(p.observe(toolTurn(t, "s", chain, "ls")))).toEqual(["Cache"]);
  });

  it("a request without the tool results (history compacted mid-loop) ends the wait: the next call opens its own, whose results are known", async () => {
    const { p, metric } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1] },
    });
    const out = p.observe(toolTurn(0, "s", chainOf(8)));
    p.observe(ack(10, out[0], "applied", { epoch: 1 }));
    // The agent compacted: its next request ends with the user's message, not the call's results.
    expect(types(p.observe(started(1_000, "s", { tail: tail("user") })))).toEqual(["ToolEnd"]);
    expect(p.state.sessions.get("s")?.tool).toBeNull();
    expect(p.durations.count("search")).toBe(1);
    // That request's own call opens a wait (kept now: the 1 s return was learned), and its results
    // close it: no call is unknown.
    expect(types(p.observe(toolTurn(2_000, "s", chainOf(6), "search", "c2")))).toEqual(["Cache"]);
    expect(p.state.sessions.get("s")?.tool?.callIds).toEqual(["c2"]);
    p.observe(started(3_000, "s", { tail: tail("tool", ["c2"]) }));
    expect(p.state.sessions.get("s")?.tool).toBeNull();
    expect(p.durations.count("search")).toBe(2);
    expect(await metric("kvctl_policy_bad_input_total")).toEqual([]);
  });

  it("tool results for a call never seen, and a rejected ToolStart: counted, nothing sent, the view stays consistent", async () => {
    const { p, metric } = policy({
      ...ONLY("tools"),
      tools: { enabled: true, priorMeanSeconds: 600, tauCandidatesSeconds: [1] },
    });
    expect(p.observe(started(0, "s", { tail: tail("tool", ["ghost"]) }))).toEqual([]);
    const out = p.observe(toolTurn(1, "s", chainOf(4)));
    p.observe(ack(2, out[0], "rejected", { detail: "session_id" }));
    expect(p.state.sessions.get("s")?.tool).toBeNull();
    expect(p.observe(started(3, "s", { tail: tail("tool", ["c1"]) }))).toEqual([]);
    expect(await metric("kvctl_policy_bad_input_total")).toEqual([
      'kvctl_policy_bad_input_total{kind="tool_result_unknown_call"} 2',
    ]);
  });
});

describe("queued requests hold their cached prefix", () => {
  const overlap = (gpu: number, host = 0) => ({ GPU: gpu, CPU_PINNED: host, DISK: 0, EXTERNAL: 0 });

  it("pins the blocks the worker holds from arrival until the turn ends, then releases exactly those", async () => {
    const { p, metric } = policy(ONLY("inflight"));
    const prompt = chainOf(10);
    const out = p.observe(
      started(0, "s", { requestId: "q1", promptBlocks: prompt, overlap: overlap(4, 3) }),
    );
    expect(out.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: prompt.slice(0, 7), pin: true, ttl_seconds: 120 },
    ]);
    expect(out[0].reason).toMatch(/^request queued: hold 7 of its 7 cached prefix blocks/);
    expect(await metric("kvctl_policy_pin_budget_used_blocks")).toEqual([
      'kvctl_policy_pin_budget_used_blocks{worker="w0"} 7',
    ]);
    const done = p.observe(finished(9_000, "s", prompt, { requestId: "q1" }));
    expect(done.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: prompt.slice(0, 7), pin: false },
    ]);
    expect(p.state.budget.used("w0")).toBe(0);
  });

  it("without an index it holds what the session's last turn left on that worker; nothing known, nothing held", () => {
    const { p } = policy(ONLY("inflight"));
    const chain = chainOf(6);
    expect(p.observe(started(0, "s", { requestId: "a", promptBlocks: chain }))).toEqual([]);
    p.observe(finished(10, "s", chain, { requestId: "a" }));
    const next = [...chain, 2000n, 2001n];
    expect(
      p.observe(started(20, "s", { requestId: "b", promptBlocks: next })).map((c) => c.command),
    ).toEqual([{ type: "Cache", block_hashes: chain, pin: true, ttl_seconds: 120 }]);
    // Another worker holds nothing of it: no hold there.
    expect(
      p.observe(started(30, "s", { requestId: "c", promptBlocks: next, worker: "w1" })),
    ).toEqual([]);
  });

  it("stays within the budget view (shared blocks once); a partial ack keeps only what was pinned; an expired hold is not unpinned", () => {
    const { p } = policy({ ...ONLY("inflight"), pins: { enabled: false, budgetBlocks: 8 } });
    const shared = chainOf(4);
    const a = [...shared, ...chainOf(3, 5000n)];
    const b = [...shared, ...chainOf(3, 6000n)];
    const outA = p.observe(
      started(0, "a", { requestId: "ra", promptBlocks: a, overlap: overlap(7) }),
    );
    expect(cmd(outA, "Cache").block_hashes).toEqual(a);
    // 8 - 7 = 1 block of room, the 4 shared ones are already held: b gets its first 5.
    const outB = p.observe(
      started(1, "b", { requestId: "rb", promptBlocks: b, overlap: overlap(7) }),
    );
    expect(cmd(outB, "Cache").block_hashes).toEqual(b.slice(0, 5));
    p.observe(ack(2, outB[0], "partial", { affected: 4 }));
    expect(p.observe(finished(3, "b", b, { requestId: "rb" })).map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: b.slice(0, 4), pin: false },
    ]);
    // a's hold outlives its TTL: the worker dropped it, the gateway sends nothing for it.
    expect(p.observe(finished(121_000, "a", a, { requestId: "ra" }))).toEqual([]);
    expect(p.state.budget.used("w0")).toBe(0);
  });

  it("a partial ack for blocks the worker no longer had releases exactly those and leaves the budget open", () => {
    const { p } = policy({ ...ONLY("inflight"), pins: { enabled: false, budgetBlocks: 8 } });
    const a = chainOf(4, 100n);
    const outA = p.observe(
      started(0, "a", { requestId: "ra", promptBlocks: a, overlap: overlap(4) }),
    );
    // The worker had evicted a's second block before the pin came (in the middle, not the tail).
    p.observe(ack(1, outA[0], "partial", { affected: 3, missing: [a[1]], skipped: 0 }));
    expect(p.state.budget.used("w0")).toBe(3);
    // Room is left (8 - 3): the next request is held in full, not refused as if the worker were full.
    const b = chainOf(5, 200n);
    expect(
      cmd(
        p.observe(started(2, "b", { requestId: "rb", promptBlocks: b, overlap: overlap(5) })),
        "Cache",
      ).block_hashes,
    ).toEqual(b);
    // a's release unpins the three it holds, not the one the worker never pinned.
    expect(p.observe(finished(3, "a", a, { requestId: "ra" })).map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: [a[0], a[2], a[3]], pin: false },
    ]);
  });

  it("a partial ack for blocks past the worker's budget marks it full and asks for them again when budget comes free", () => {
    const { p } = policy({ ...ONLY("inflight"), pins: { enabled: false, budgetBlocks: 8 } });
    const a = chainOf(4, 100n);
    const b = chainOf(4, 200n);
    const outA = p.observe(
      started(0, "a", { requestId: "ra", promptBlocks: a, overlap: overlap(4) }),
    );
    const outB = p.observe(
      started(1, "b", { requestId: "rb", promptBlocks: b, overlap: overlap(4) }),
    );
    expect(cmd(outB, "Cache").block_hashes).toEqual(b);
    p.observe(ack(2, outA[0], "applied", { affected: 4 }));
    // The worker's own budget is smaller than the gateway's view: b's last two were refused.
    p.observe(ack(3, outB[0], "partial", { affected: 2, missing: [], skipped: 2 }));
    expect(p.state.budget.used("w0")).toBe(6);
    expect(
      p.observe(
        started(4, "c", { requestId: "rc", promptBlocks: chainOf(2, 300n), overlap: overlap(2) }),
      ),
    ).toEqual([]);
    // a is served: its budget goes to b's refused tail first (the oldest request still short).
    const out = p.observe(finished(5, "a", a, { requestId: "ra" }));
    expect(out.map((c) => c.command)).toContainEqual({
      type: "Cache",
      block_hashes: b.slice(2),
      pin: true,
      ttl_seconds: 120,
    });
  });
});

describe("queued requests within the caps", () => {
  const overlap = (gpu: number) => ({ GPU: gpu, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 });

  it("a request's hold counts toward its session's and its tenant's caps with the session's own holds, whatever room the budget has", () => {
    const caps = (t: string) => (t === "a" ? { perSession: 6, perTenant: 9 } : null);
    const { p } = policy(
      { ...ONLY("inflight"), pins: { enabled: false, budgetBlocks: 100 } },
      { tenantCaps: caps },
    );
    const prompt = chainOf(10, 100n);
    const held = (out: ReturnType<typeof p.observe>) =>
      out.map((c) => (c.command.type === "Cache" ? c.command.block_hashes.length : 0));
    expect(
      held(
        p.observe(
          started(0, "s1", {
            tenant: "a",
            requestId: "r1",
            promptBlocks: prompt,
            overlap: overlap(10),
          }),
        ),
      ),
    ).toEqual([6]);
    // A second request of the session over the same prefix: the 6 its session holds cost nothing
    // more, the rest is over the session's cap.
    expect(
      held(
        p.observe(
          started(1, "s1", {
            tenant: "a",
            requestId: "r2",
            promptBlocks: prompt,
            overlap: overlap(10),
          }),
        ),
      ),
    ).toEqual([6]);
    // Another session of the tenant: 3 left under the tenant's 9.
    expect(
      held(
        p.observe(
          started(2, "s2", {
            tenant: "a",
            requestId: "r3",
            promptBlocks: chainOf(10, 300n),
            overlap: overlap(10),
          }),
        ),
      ),
    ).toEqual([3]);
    // Another tenant is not affected.
    expect(
      held(
        p.observe(
          started(3, "s3", {
            tenant: "b",
            requestId: "r4",
            promptBlocks: chainOf(10, 500n),
            overlap: overlap(10),
          }),
        ),
      ),
    ).toEqual([10]);
    expect(p.state.budget.used("w0")).toBe(19);
    // Served: the room comes back to the tenant, and the oldest request short of its prefix (s2's)
    // takes it up to its session's cap; a new session of the tenant gets what is left under 9.
    p.observe(finished(10, "s1", prompt, { requestId: "r1" }));
    const topUp = p.observe(finished(11, "s1", prompt, { requestId: "r2" }));
    expect(topUp.map((c) => c.command)).toContainEqual({
      type: "Cache",
      block_hashes: chainOf(10, 300n).slice(3, 6),
      pin: true,
      ttl_seconds: 120,
    });
    expect(p.state.budget.heldFor("s2")).toBe(6);
    expect(
      held(
        p.observe(
          started(12, "s4", {
            tenant: "a",
            requestId: "r5",
            promptBlocks: chainOf(10, 700n),
            overlap: overlap(10),
          }),
        ),
      ),
    ).toEqual([3]);
  });
});

describe("queued requests: budget that comes free goes to the oldest request still short of its prefix", () => {
  it("tells pins that paid off from wasted ones: served from cache while held, or never", async () => {
    const { p, metric } = policy(ONLY("inflight"));
    const prompt = chainOf(10);
    p.observe(
      started(0, "s", {
        requestId: "q1",
        promptBlocks: prompt,
        overlap: { GPU: 6, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 },
      }),
    );
    expect(await metric("kvctl_policy_pinned_blocks_open")).toEqual([
      'kvctl_policy_pinned_blocks_open{kind="inflight",outcome="wasted"} 6',
    ]);
    // served with 4 of the 6 held blocks from cache: those 4 were hit, the other 2 were held for nothing
    p.observe(
      finished(9_000, "s", prompt, {
        requestId: "q1",
        usage: { promptTokens: 10 * PAGE, completionTokens: 1, cachedTokens: 4 * PAGE + 1 },
      }),
    );
    expect(await metric("kvctl_policy_pinned_blocks_total")).toEqual([
      'kvctl_policy_pinned_blocks_total{kind="inflight",outcome="hit"} 4',
      'kvctl_policy_pinned_blocks_total{kind="inflight",outcome="wasted"} 2',
    ]);
    expect(await metric("kvctl_policy_pinned_blocks_open")).toEqual([]);
  });

  it("tops up in arrival order when a turn ends", () => {
    const { p } = policy({ ...ONLY("inflight"), pins: { enabled: false, budgetBlocks: 8 } });
    const shared = chainOf(4);
    const own = (base: bigint) => [...shared, ...chainOf(3, base)];
    const [a, b, c] = [own(5000n), own(6000n), own(7000n)];
    const at = (o: { GPU: number }) => ({ ...o, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 });
    expect(
      cmd(
        p.observe(started(0, "a", { requestId: "ra", promptBlocks: a, overlap: at({ GPU: 7 }) })),
        "Cache",
      ).block_hashes,
    ).toEqual(a);
    // One block of room: b holds the shared four (free, a holds them) and one of its own.
    expect(
      cmd(
        p.observe(started(1, "b", { requestId: "rb", promptBlocks: b, overlap: at({ GPU: 7 }) })),
        "Cache",
      ).block_hashes,
    ).toEqual(b.slice(0, 5));
    expect(
      cmd(
        p.observe(started(2, "c", { requestId: "rc", promptBlocks: c, overlap: at({ GPU: 7 }) })),
        "Cache",
      ).block_hashes,
    ).toEqual(c.slice(0, 4));
    // a is served: its own three blocks free up; b (older) gets its last two, then c one.
    const out = p.observe(finished(3, "a", a, { requestId: "ra" }));
    expect(out.map((x) => x.command)).toEqual([
      { type: "Cache", block_hashes: a, pin: false },
      { type: "Cache", block_hashes: b.slice(5), pin: true, ttl_seconds: 120 },
      { type: "Cache", block_hashes: c.slice(4, 5), pin: true, ttl_seconds: 120 },
    ]);
    expect(out[1].reason).toMatch(/hold 2 more of its 7/);
    expect(p.state.budget.used("w0")).toBe(8);
    // b's release: exactly what it holds.
    expect(p.observe(finished(4, "b", b, { requestId: "rb" }))[0].command).toEqual({
      type: "Cache",
      block_hashes: b,
      pin: false,
    });
  });
});

describe("reasoning", () => {
  const reasoningTurn = (at: number, sid: string, model: string, finishReason = "stop") =>
    finished(at, sid, chainOf(10), {
      promptBlocks: 4,
      model,
      finishReason,
      toolCalls: finishReason === "tool_calls" ? [{ id: "c", name: "t" }] : [],
      ranges: {
        system: null,
        history: { start: 0, end: 0 },
        prompt: { start: 0, end: 16 },
        reasoning: { start: 18, end: 30 },
        output: { start: 16, end: 40 },
      },
    });

  it("templates that drop reasoning: transient at the turn's end, purged at the next user turn (sparing blocks the prompt reuses)", () => {
    const { p } = policy(ONLY("think"));
    const out = p.observe(reasoningTurn(0, "s", "Qwen3-8B"));
    // Tokens 18..30 lie in blocks 4..7 (page 4).
    expect(out.map((c) => c.command)).toEqual([
      { type: "Think", block_hashes: chainOf(10).slice(4, 8), transient: true },
    ]);
    expect(p.observe(started(1, "s", { tail: tail("tool") }))).toEqual([]);
    const next = p.observe(started(2, "s", { tail: tail("user"), promptBlocks: [1004n] }));
    expect(next.map((c) => c.command)).toEqual([
      { type: "Think", block_hashes: [1005n, 1006n, 1007n], transient: false },
    ]);
  });

  it("interleaved-thinking families keep reasoning through the tool loop, then mark and purge it", () => {
    const { p } = policy(ONLY("think"));
    expect(p.observe(reasoningTurn(0, "s", "zai/GLM-4.6", "tool_calls"))).toEqual([]);
    const end = p.observe(reasoningTurn(1, "s", "zai/GLM-4.6"));
    expect(end.map((c) => c.command.type === "Think" && c.command.transient)).toEqual([true]);
    expect(cmd(p.observe(started(2, "s", { tail: tail("user") })), "Think").transient).toBe(false);
  });
});

describe("idle, leases and pressure", () => {
  const idle = (at: number, sid: string) => ({
    type: "SessionIdle" as const,
    at,
    sessionId: sid,
    worker: "w0",
    idleMs: 30_000,
    chain: [],
  });

  it("idle pauses under a lease, a return renews it, close revokes it", () => {
    const { p } = policy(ONLY("idle"));
    p.observe(started(0, "s"));
    p.observe(finished(1, "s", chainOf(5)));
    const pause = p.observe(idle(30_000, "s"));
    expect(pause.map((c) => c.command)).toEqual([
      { type: "Pause", block_hashes: chainOf(5), ttl_seconds: 300, lease_id: "s.1" },
    ]);
    expect(p.observe(idle(31_000, "s"))).toEqual([]);
    expect(p.observe(started(40_000, "s")).map((c) => c.command)).toEqual([
      { type: "RenewLease", lease_id: "s.1", new_ttl_seconds: 300 },
    ]);
    const close = p.observe({
      type: "SessionHint",
      at: 41_000,
      sessionId: "s",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(close.map((c) => c.command)).toEqual([{ type: "RevokeLease", lease_id: "s.1" }]);
  });

  it("a return renews only what the lease still holds: not what a partial answer left out, nor holds that ran out with it", () => {
    // Budget 8: after a partial Pause (2 of 6 blocks) a marker session takes the 6 freed blocks.
    const { p } = policy({
      ...ONLY("idle"),
      pins: { enabled: true, budgetBlocks: 8 },
      idle: { enabled: true, budgetShare: 1 },
    });
    p.observe(started(0, "s"));
    p.observe(finished(1, "s", chainOf(6)));
    const [pause] = p.observe(idle(30_000, "s"));
    p.observe(ack(30_001, pause, "partial", { affected: 2 }));
    expect(p.state.budget.usedBy("w0", "lease")).toBe(2);
    p.observe(started(30_002, "m"));
    p.observe(
      finished(30_003, "m", chainOf(6, 9000n), {
        markers: {
          breakpoints: [{ tokens: 6 * PAGE, ttlSeconds: 3600, at: "system" }],
          errors: [],
        },
      }),
    );
    expect(p.state.budget.used("w0")).toBe(8);
    expect(types(p.observe(started(40_000, "s")))).toEqual(["RenewLease"]);
    expect([p.state.budget.usedBy("w0", "lease"), p.state.budget.used("w0")]).toEqual([2, 8]);
    // Past the lease's TTL its holds are gone from the view (and the worker's lease with them):
    // the renewal holds nothing; the worker's refusal then forgets the lease.
    const { p: q } = policy(ONLY("idle"));
    q.observe(started(0, "t"));
    q.observe(finished(1, "t", chainOf(4)));
    q.observe(idle(30_000, "t"));
    const [renew] = q.observe(started(30_000 + 301_000, "t"));
    expect(q.state.budget.used("w0")).toBe(0);
    q.observe(ack(331_001, renew, "rejected", { detail: "unknown lease" }));
    expect(q.state.sessions.get("t")?.lease).toBeNull();
  });

  it("a pause covers the chain up to the reasoning the think rule marks transient (the worker refuses to park transient blocks)", () => {
    const { p } = policy({ ...ONLY("idle"), think: { enabled: true } });
    p.observe(started(0, "s"));
    const ranges = {
      system: null,
      history: { start: 0, end: 0 },
      prompt: { start: 0, end: 16 },
      reasoning: { start: 18, end: 30 },
      output: { start: 16, end: 40 },
    };
    p.observe(finished(1, "s", chainOf(10), { promptBlocks: 4, model: "Qwen3-8B", ranges }));
    // Tokens from 18 lie in block 4 on (page 4): blocks 0..3 are what the next prompt reuses.
    expect(cmd(p.observe(idle(30_000, "s")), "Pause").block_hashes).toEqual(chainOf(4));
    // Interleaved thinking in a tool loop keeps the reasoning: the whole chain is parked.
    const { p: q } = policy({ ...ONLY("idle"), think: { enabled: true } });
    q.observe(started(0, "t"));
    q.observe(
      finished(1, "t", chainOf(10), {
        promptBlocks: 4,
        model: "zai/GLM-4.6",
        finishReason: "tool_calls",
        toolCalls: [{ id: "c", name: "x" }],
        ranges,
      }),
    );
    expect(cmd(q.observe(idle(30_000, "t")), "Pause").block_hashes).toEqual(chainOf(10));
  });

  it("a Pause acked noop with every block missing holds no lease: close sends no RevokeLease and the budget is free", () => {
    const { p } = policy(ONLY("idle"));
    p.observe(started(0, "s"));
    p.observe(finished(1, "s", chainOf(5)));
    const [pause] = p.observe(idle(30_000, "s"));
    p.observe(ack(30_001, pause, "noop", { affected: 0, missing: chainOf(5) }));
    expect(p.state.budget.used("w0")).toBe(0);
    const close = p.observe({
      type: "SessionHint",
      at: 41_000,
      sessionId: "s",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(close.map((c) => c.command.type)).not.toContain("RevokeLease");
    // A noop that found the blocks (already on host) keeps its lease, revoked on close.
    const { p: q } = policy(ONLY("idle"));
    q.observe(started(0, "t"));
    q.observe(finished(1, "t", chainOf(5)));
    const [pz] = q.observe(idle(30_000, "t"));
    q.observe(ack(30_001, pz, "noop", { affected: 0 }));
    const closeT = q.observe({
      type: "SessionHint",
      at: 41_000,
      sessionId: "t",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(closeT.map((c) => c.command)).toEqual([{ type: "RevokeLease", lease_id: "t.1" }]);
  });

  it("a pause holds the session's own tail within the paused share of the budget; renew and revoke keep the view", () => {
    const { p } = policy({
      ...ONLY("idle"),
      pins: { enabled: false, budgetBlocks: 20 },
      idle: { enabled: true, budgetShare: 0.5 },
    });
    const shared = chainOf(6);
    const a = [...shared, ...chainOf(4, 5000n)];
    const b = [...shared, ...chainOf(8, 6000n)];
    const c = [...shared, ...chainOf(3, 7000n)];
    for (const [sid, chain] of [
      ["a", a],
      ["b", b],
      ["c", c],
    ] as const) {
      p.observe(started(0, sid));
      p.observe(finished(1, sid, chain));
    }
    // a's own tail (the shared prefix stays by the others' turns): 4 blocks of the 10 allowed.
    expect(p.observe(idle(30_000, "a")).map((c) => c.command)).toEqual([
      { type: "Pause", block_hashes: a.slice(6), ttl_seconds: 300, lease_id: "a.1" },
    ]);
    expect(p.state.budget.usedBy("w0", "lease")).toBe(4);
    // b's 8 would pass the share (4 + 8 > 10): no pause, the session stays as it is.
    expect(p.observe(idle(30_000, "b"))).toEqual([]);
    expect(types(p.observe(idle(30_000, "c")))).toEqual(["Pause"]);
    expect(p.state.budget.usedBy("w0", "lease")).toBe(7);
    // A return renews a's lease (its hold in the view too); close revokes it and frees the view.
    expect(types(p.observe(started(40_000, "a")))).toEqual(["RenewLease"]);
    expect(p.state.budget.holdsOf("w0", "a", "lease").get(a[6])?.[0].expiresAt).toBe(
      40_000 + 300_000,
    );
    p.observe({
      type: "SessionHint",
      at: 41_000,
      sessionId: "a",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    expect(p.state.budget.usedBy("w0", "lease")).toBe(3);
  });

  it("a lease past the paused share preempts the lease of a session expected back later, released through its RevokeLease", () => {
    const { p } = policy({
      ...ONLY("idle"),
      pins: { enabled: false, budgetBlocks: 20 },
      idle: { enabled: true, budgetShare: 0.5 },
    });
    p.observe(started(0, "a"));
    p.observe(finished(1, "a", chainOf(4, 5000n)));
    expect(types(p.observe(idle(10_000, "a")))).toEqual(["Pause"]);
    p.observe(started(19_000, "b"));
    p.observe(finished(20_000, "b", chainOf(8, 6000n)));
    // b needs 8 of the share's 10 and a holds 4; a, idle since 1 ms, is expected back after b
    // (idle since 20 s): a's lease goes through its own release, then b pauses.
    const out = p.observe(idle(30_000, "b"));
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([
      ["RevokeLease", "a"],
      ["Pause", "b"],
    ]);
    expect(out[0].reason).toMatch(/^preempted for b's lease/);
    // Released, not purged: a may still come back and find what LRU kept of it.
    expect(out[0].command).toEqual({ type: "RevokeLease", lease_id: "a.1", purge: false });
    expect(p.state.budget.usedBy("w0", "lease")).toBe(8);
    expect(p.state.sessions.get("a")?.lease).toBeNull();
  });

  it("a second idle period replaces the renewed lease: the old one is released, never purged, before the new Pause", () => {
    const { p } = policy(ONLY("idle"));
    p.observe(started(0, "s"));
    p.observe(finished(1, "s", chainOf(5)));
    expect(types(p.observe(idle(30_000, "s")))).toEqual(["Pause"]);
    expect(types(p.observe(started(40_000, "s")))).toEqual(["RenewLease"]);
    p.observe(finished(41_000, "s", chainOf(7)));
    const again = p.observe(idle(80_000, "s"));
    expect(again.map((c) => c.command)).toEqual([
      { type: "RevokeLease", lease_id: "s.1", purge: false },
      { type: "Pause", block_hashes: chainOf(7), ttl_seconds: 300, lease_id: "s.2" },
    ]);
  });

  it("markers yield to a parked session when the budget, not the share, binds; a session cap refuses whatever could be preempted", () => {
    const { p } = policy({
      ...ONLY("idle"),
      pins: { enabled: false, budgetBlocks: 10 },
      idle: { enabled: true, budgetShare: 1 },
    });
    const marked = chainOf(7, 9000n);
    p.state.budget.hold("w0", marked, {
      session: "m",
      kind: "marker",
      ttlSeconds: 600,
      expiresAt: 600_000,
    });
    p.observe(started(0, "a"));
    p.observe(finished(1, "a", chainOf(5, 5000n)));
    const out = p.observe(idle(30_000, "a"));
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([
      ["Cache", "m"],
      ["Pause", "a"],
    ]);
    expect(out[0].command).toEqual({ type: "Cache", block_hashes: marked, pin: false });
    expect(p.state.budget.usedBy("w0", "marker")).toBe(0);
    const capped = policy({
      ...ONLY("idle"),
      pins: { enabled: false, budgetBlocks: 10, sessionCapBlocks: 4 },
      idle: { enabled: true, budgetShare: 1 },
    });
    capped.p.state.budget.hold("w0", marked, {
      session: "m",
      kind: "marker",
      ttlSeconds: 600,
      expiresAt: 600_000,
    });
    capped.p.observe(started(0, "a"));
    capped.p.observe(finished(1, "a", chainOf(5, 5000n)));
    expect(capped.p.observe(idle(30_000, "a"))).toEqual([]);
    expect(capped.p.state.budget.usedBy("w0", "marker")).toBe(7);
  });

  it("a queued request's hold preempts a parked session's lease when the budget is full, released through its RevokeLease", () => {
    const { p } = policy({
      ...ONLY("inflight"),
      idle: { enabled: true, budgetShare: 1 },
      pins: { enabled: false, budgetBlocks: 10 },
    });
    p.observe(started(0, "a"));
    p.observe(finished(1, "a", chainOf(6, 5000n)));
    expect(types(p.observe(idle(10_000, "a")))).toEqual(["Pause"]);
    // b's 8 cached prefix blocks need 4 of a's 6 leased ones: a's lease goes, b holds all 8.
    const prompt = chainOf(8, 6000n);
    const out = p.observe(
      started(11_000, "b", {
        requestId: "rb",
        promptBlocks: prompt,
        overlap: { GPU: 8, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 },
      }),
    );
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([
      ["RevokeLease", "a"],
      ["Cache", "b"],
    ]);
    expect(out[0].command).toEqual({ type: "RevokeLease", lease_id: "a.1", purge: false });
    expect(out[1].command).toEqual({
      type: "Cache",
      block_hashes: prompt,
      pin: true,
      ttl_seconds: 120,
    });
    expect(p.state.budget.usedBy("w0", "lease")).toBe(0);
    expect(p.state.budget.usedBy("w0", "inflight")).toBe(8);
    expect(p.state.sessions.get("a")?.lease).toBeNull();
    // Another request whose hold only other requests' holds could make room for pins what fits.
    const c = chainOf(4, 7000n);
    expect(
      cmd(
        p.observe(
          started(12_000, "c", {
            requestId: "rc",
            promptBlocks: c,
            overlap: { GPU: 4, CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 },
          }),
        ),
        "Cache",
      ).block_hashes,
    ).toEqual(c.slice(0, 2));
  });

  it("a tool keep preempts a parked session's lease instead of being skipped", () => {
    const { p } = policy({
      ...ONLY("tools"),
      idle: { enabled: true, budgetShare: 1 },
      pins: { enabled: false, budgetBlocks: 10 },
      tools: { enabled: true, priorMeanSeconds: 1, tauCandidatesSeconds: [5] },
    });
    p.observe(started(0, "a"));
    p.observe(finished(1, "a", chainOf(6, 5000n)));
    expect(types(p.observe(idle(10_000, "a")))).toEqual(["Pause"]);
    p.observe(started(19_000, "b"));
    // b's reply is a tool call: its 8 blocks need 4 of a's 6 leased ones; a's lease goes first.
    const out = p.observe(
      finished(20_000, "b", chainOf(8, 6000n), {
        finishReason: "tool_calls",
        toolCalls: [{ id: "c1", name: "grep" }],
      }),
    );
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([
      ["RevokeLease", "a"],
      ["Cache", "b"],
    ]);
    expect(out[1].command).toMatchObject({ type: "Cache", pin: true });
    expect(p.state.budget.usedBy("w0", "lease")).toBe(0);
    expect(p.state.budget.usedBy("w0", "tool")).toBe(8);
  });

  it("the tool rule follows program admission's retention decision for the same boundary", () => {
    const toolTurn = (at: number, sid: string) =>
      finished(at, sid, chainOf(10, 7000n), {
        finishReason: "tool_calls",
        toolCalls: [{ id: "c", name: "slow" }],
      });
    // A tool expected to take a day: the rule's own choice would offload; the gate let the program go.
    const cfg = {
      ...ONLY("tools"),
      pins: { enabled: false, budgetBlocks: 100 },
      tools: { enabled: true, priorMeanSeconds: 86_400, tauCandidatesSeconds: [5] },
    };
    const own = policy(cfg);
    own.p.observe(started(0, "s"));
    expect(types(own.p.observe(toolTurn(1, "s")))).toEqual(["ToolStart"]);
    const { p } = policy(cfg);
    p.observe(started(0, "s"));
    expect(p.programRetention?.("w0", () => PAGE).decide("s", 10 * PAGE, ["slow"]).action).toBe(
      "let_go",
    );
    expect(p.observe(toolTurn(1, "s"))).toEqual([]);
    expect(p.state.sessions.get("s")?.tool?.mode).toBe("none");
    // A quick tool: kept for the decision's TTL, said so in the reason.
    const quick = policy({
      ...cfg,
      tools: { enabled: true, priorMeanSeconds: 0.5, tauCandidatesSeconds: [5] },
    });
    quick.p.observe(started(0, "s"));
    const d = quick.p.programRetention?.("w0", () => PAGE).decide("s", 10 * PAGE, ["slow"]);
    expect(d).toEqual({ action: "keep", ttlSeconds: 5 });
    const out = quick.p.observe(toolTurn(1, "s"));
    expect(out.map((c) => c.command.type)).toEqual(["Cache"]);
    expect(out[0].reason).toMatch(/program admission's retention decision, TTL 5s/);
  });

  it("program admission's retention and the tool rule learn each gap once, in one distribution", () => {
    const cfg = {
      ...ONLY("tools"),
      pins: { enabled: false, budgetBlocks: 100 },
      tools: { enabled: true, priorMeanSeconds: 1, tauCandidatesSeconds: [5] },
    };
    const { p } = policy(cfg);
    const gate = p.programRetention?.("w0", () => PAGE);
    p.observe(started(0, "s"));
    gate?.decide("s", 10 * PAGE, ["grep"]);
    p.observe(
      finished(1, "s", chainOf(10, 7000n), {
        finishReason: "tool_calls",
        toolCalls: [{ id: "c", name: "grep" }],
      }),
    );
    // The program comes back: the gate sees it first, then the tool results' turn ends the wait.
    gate?.returned("s");
    p.observe(started(2_000, "s", { tail: tail("tool", ["c"]) }));
    expect(p.durations.count("grep")).toBe(1);
    // With the tool rule off the recorders learn the gaps into the same distribution.
    const off = policy({ ...cfg, tools: { enabled: false } });
    const g2 = off.p.programRetention?.("w0", () => PAGE);
    g2?.decide("s", 10 * PAGE, ["grep"]);
    g2?.returned("s");
    expect(off.p.durations.count("grep")).toBe(1);
  });

  it("a lease in the session store is re-issued by a replica that never saw it", () => {
    const { p } = policy(ONLY("idle"));
    const stored = {
      worker: "w0",
      pins: [],
      leases: [{ worker: "w0", leaseId: "s.4", blockHashes: ["1", "2"], ttlSeconds: 300, atMs: 0 }],
      tool: null,
    };
    const out = p.observe(started(10_000, "s", { stored }));
    expect(out.map((c) => c.command)).toEqual([
      { type: "RenewLease", lease_id: "s.4", new_ttl_seconds: 300 },
    ]);
    expect(out[0].reason).toMatch(/re-issued from the session store/);
    // An expired one is not.
    const { p: p2 } = policy(ONLY("idle"));
    expect(p2.observe(started(400_000, "s", { stored }))).toEqual([]);
  });

  it("past the high watermark the largest idle sessions pause until the low one; hysteresis", () => {
    const { p } = policy({ ...ONLY("idle"), idle: { enabled: true, deviceBlocks: 20 } });
    p.observe(finished(0, "a", chainOf(6, 100n)));
    p.observe(finished(1, "b", chainOf(4, 200n)));
    p.observe(finished(2, "c", chainOf(5, 300n)));
    p.observe(started(3, "d"));
    // 15 + d's 4 = 19 >= 0.95 * 20: pause a (6), leaving 13 <= 16.
    const out = p.observe(finished(4, "d", chainOf(4, 400n)));
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([["Pause", "a"]]);
    expect(out[0].reason).toMatch(/^pressure: working set 19\/20/);
    // 13 + 4 = 17: over low but under high: not tripped again.
    expect(p.observe(finished(5, "e", chainOf(4, 500n)))).toEqual([]);
  });

  it("reads the working set from the worker's KV events when they show more than its own sessions", () => {
    const { p } = policy({ ...ONLY("idle"), idle: { enabled: true, deviceBlocks: 20 } });
    p.observe(finished(0, "a", chainOf(6, 100n), { workerDeviceBlocks: 6 }));
    p.observe(finished(1, "b", chainOf(2, 200n), { workerDeviceBlocks: 8 }));
    // Own sessions hold 8 blocks; the index saw 19 on the GPU (other replicas, sessionless
    // requests): over 0.95 * 20, so the largest idle session pauses; 19 - 6 = 13 <= 16.
    const out = p.observe(finished(2, "c", chainOf(1, 300n), { workerDeviceBlocks: 19 }));
    expect(out.map((c) => [c.command.type, c.sessionId])).toEqual([["Pause", "a"]]);
    expect(out[0].reason).toMatch(/^pressure: working set 19\/20/);
    // Without events (null) the own view (3 blocks unpaused) decides: nothing to do.
    const { p: p2 } = policy({ ...ONLY("idle"), idle: { enabled: true, deviceBlocks: 20 } });
    p2.observe(finished(0, "a", chainOf(6, 100n), { workerDeviceBlocks: null }));
    expect(p2.observe(finished(1, "c", chainOf(1, 300n), { workerDeviceBlocks: null }))).toEqual(
      [],
    );
  });
});

describe("rewrite -> prune", () => {
  it("prunes the old branch below the divergence block, unless another session stands on it", () => {
    const { p } = policy(ONLY("prune"));
    const old = chainOf(8);
    p.observe(finished(0, "s", old, { promptBlocks: 6 }));
    const rewritten = [...old.slice(0, 3), 77n, 78n];
    const out = p.observe(finished(1, "s", rewritten));
    expect(out.map((c) => c.command)).toEqual([{ type: "Prune", after_block_hash: old[3] }]);
    expect(out[0].reason).toBe("history rewritten: diverged at block 3 of 8");
    // A plain continuation prunes nothing.
    expect(p.observe(finished(2, "s", [...rewritten, 79n]))).toEqual([]);
    // Session t continues the branch s leaves: no prune.
    p.observe(finished(3, "t", [...rewritten, 79n, 80n]));
    expect(p.observe(finished(4, "s", [...rewritten.slice(0, 2), 90n]))).toEqual([]);
  });

  it("a rewrite hint with keep_tokens prunes at once", () => {
    const { p } = policy(ONLY("prune"));
    p.observe(finished(0, "s", chainOf(8)));
    const out = p.observe({
      type: "SessionHint",
      at: 1,
      sessionId: "s",
      event: "rewrite",
      toolName: null,
      toolCallId: null,
      keepTokens: 2 * PAGE + 1,
    });
    expect(out.map((c) => c.command)).toEqual([{ type: "Prune", after_block_hash: chainOf(8)[2] }]);
  });
});

describe("session end -> prune", () => {
  const close = (at: number, sessionId: string): Observation => ({
    type: "SessionHint",
    at,
    sessionId,
    event: "close",
    toolName: null,
    toolCallId: null,
    keepTokens: null,
  });

  it("prunes the branch only the ended session stood on, below the prefix other sessions share", () => {
    const { p, decisions } = policy(ONLY("prune"));
    const shared = chainOf(3, 10n);
    const a = [...shared, 100n, 101n, 102n];
    p.observe(finished(0, "a", a));
    p.observe(finished(1, "b", [...shared, 200n]));
    // Its own later turns keep a's blocks its own.
    p.observe(finished(2, "a", [...a, 103n]));
    const out = p.observe(close(3, "a"));
    expect(out.map((c) => [c.worker, c.command])).toEqual([
      ["w0", { type: "Prune", after_block_hash: 100n }],
    ]);
    expect(out[0].reason).toBe("session closed: its own branch from block 3 of 7");
    // b ended when every block it stood on was shared with a: nothing of its own beyond them.
    expect(p.observe(finished(4, "c", [...shared, 200n]))).toEqual([]);
    expect(p.observe(close(5, "b"))).toEqual([]);
    expect(decisions.some((l) => l.includes("no block of its own"))).toBe(true);
    // The view is gone with the session: a second close is an unknown session, not a second prune.
    expect(p.observe(close(6, "a"))).toEqual([]);
  });

  it("goes out after the session's own releases, leaves the prefix the client marked for caching, and not with onClose off", () => {
    const bps = { breakpoints: [{ tokens: 2 * PAGE, ttlSeconds: 300, at: "system" }], errors: [] };
    const { p } = policy({ ...ONLY("pins"), prune: { enabled: true } });
    p.observe(finished(1, "a", [...chainOf(2, 10n), 100n, 101n], { markers: bps }));
    // The marked prefix (2 blocks) stays even though no other session stood on it.
    const out = p.observe(close(2, "a"));
    expect(types(out)).toEqual(["Cache", "Prune"]);
    expect(out[1].command).toEqual({ type: "Prune", after_block_hash: 100n });
    const { p: off } = policy({ ...ONLY("prune"), prune: { enabled: true, onClose: false } });
    off.observe(finished(0, "a", chainOf(4)));
    expect(off.observe(close(1, "a"))).toEqual([]);
  });
});

describe("cold worker -> warm", () => {
  it("a joining worker gets Warm of the hottest pinned prefixes (storage keys from the addon), only with a storage backend", () => {
    const bps = { breakpoints: [{ tokens: 8, ttlSeconds: 3600, at: "system" }], errors: [] };
    const { p } = policy({ ...ONLY("warm"), warm: { enabled: true, storage: true } });
    p.observe(finished(0, "a", chainOf(4), { markers: bps }));
    p.observe(finished(1, "b", chainOf(4), { markers: bps }));
    const out = p.observe(joined(2, "w1"));
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
    expect(out.map((c) => [c.worker, c.command])).toEqual([
      [
        "w1",
        {
          type: "Warm",
          block_keys: storageKeys(tokens, { pageSize: PAGE }),
          token_ids: tokens,
          target_tier: "CPU_TIER1",
        },
      ],
    ]);
    expect(out[0].reason).toBe("worker joined: prefix of 2 blocks, 2 hits");
    const { p: off, decisions } = policy(ONLY("warm"));
    off.observe(finished(0, "a", chainOf(4), { markers: bps }));
    expect(off.observe(joined(1, "w1"))).toEqual([]);
    expect(decisions.some((l) => l.includes("no storage backend configured"))).toBe(true);
  });
});

describe("guards", () => {
  it("rate limit per worker (releases pass) and coalescing of the same command", () => {
    const g = new CommandGuards({ commandsPerSecond: 1, burst: 2, coalesceMs: 1000 });
    expect([
      g.check("w", "a", false, 0),
      g.check("w", "b", false, 0),
      g.check("w", "c", false, 0),
    ]).toEqual(["send", "send", "rate_limited"]);
    expect(g.check("w", null, true, 0)).toBe("send");
    expect(g.check("x", "k", false, 0)).toBe("send");
    expect(g.check("x", "k", false, 500)).toBe("coalesced");
    expect(g.check("x", "k", false, 1500)).toBe("send");
  });

  it("a held-back pin is not recorded as held", async () => {
    const { p, metric } = policy({
      ...ONLY("pins"),
      guards: { commandsPerSecond: 1, burst: 1, coalesceMs: 0 },
    });
    const m = (n: number) => ({
      breakpoints: [{ tokens: n * PAGE, ttlSeconds: 300, at: "auto" }],
      errors: [],
    });
    expect(p.observe(finished(0, "a", chainOf(2, 10n), { markers: m(2) }))).toHaveLength(1);
    expect(p.observe(finished(0, "b", chainOf(2, 20n), { markers: m(2) }))).toEqual([]);
    expect(p.state.budget.used("w0")).toBe(2);
    expect(await metric("kvctl_policy_guarded_total")).toEqual([
      'kvctl_policy_guarded_total{policy="cache_markers",type="Cache",verdict="rate_limited"} 1',
    ]);
  });

  it("hints for a session this replica never saw are counted and change nothing", async () => {
    const { p, metric } = policy();
    expect(
      p.observe({
        type: "SessionHint",
        at: 0,
        sessionId: "nobody",
        event: "close",
        toolName: null,
        toolCallId: null,
        keepTokens: null,
      }),
    ).toEqual([]);
    expect(p.state.sessions.size).toBe(0);
    expect(await metric("kvctl_policy_bad_input_total")).toEqual([
      'kvctl_policy_bad_input_total{kind="hint_unknown_session"} 1',
    ]);
  });
});

describe("policies config", () => {
  const base = { workers: [{ id: "w0", url: "http://127.0.0.1:1" }], policy: "agent" };
  it("defaults the rules the ablation kept on (idle and inflight off); a typo or contradictory watermarks are errors naming the field", () => {
    const d = parseGatewayConfig({ ...base, policies: {} }).policies;
    expect(d?.prune).toEqual({ enabled: true, onClose: true });
    expect(d?.idle).toMatchObject({
      enabled: false,
      leaseSeconds: 300,
      highWatermark: 0.95,
      lowWatermark: 0.8,
    });
    expect(
      Object.fromEntries(
        Object.entries(d ?? {})
          .filter(([, v]) => typeof v === "object" && v !== null && "enabled" in v)
          .map(([k, v]) => [k, (v as { enabled: boolean }).enabled]),
      ),
    ).toEqual({
      pins: true,
      inflight: false,
      tools: true,
      think: true,
      idle: false,
      prune: true,
      warm: true,
    });
    expect(() => parseGatewayConfig({ ...base, policies: { pins: { budget: 5 } } })).toThrow(
      /policies\.pins: Unrecognized key: "budget"/,
    );
    expect(() =>
      parseGatewayConfig({ ...base, policies: { idle: { lowWatermark: 0.99 } } }),
    ).toThrow(/policies\.idle\.lowWatermark: idle.lowWatermark must be below idle.highWatermark/);
    expect(() => parseGatewayConfig({ ...base, policy: "smart" })).toThrow(/policy:/);
  });
});
