// Rules as functions of state: each decision reads the policy's state through a transaction and
// records steps that one place applies. A decision that throws halfway applies nothing (no command,
// no hold, no note); views are immutable; a transaction reads its own steps and nothing else changes
// until commit; the guards' dry verdict agrees with what sending in order would have said.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createAgentPolicy, type AgentPolicyOptions } from "../src/policy/agent-policy.js";
import { commit, type Outlet } from "../src/policy/commit.js";
import { CommandGuards } from "../src/policy/guards.js";
import { PolicyMetrics } from "../src/policy/metrics.js";
import { PinBudget } from "../src/policy/pin-budget.js";
import { DurationModel } from "../src/policy/duration-model.js";
import { BlockOwners } from "../src/policy/block-owners.js";
import { newSessionView } from "../src/policy/session-view.js";
import { type PolicyState, Tx } from "../src/policy/tx.js";
import { policiesConfigSchema } from "../src/contract/policies-config.js";
import type { PolicyCommand } from "../src/contract/policy.js";
import { chainOf, finished, joined, PAGE, started } from "./helpers/policy-observations.js";

const ONLY = (name: string) =>
  Object.fromEntries(
    ["pins", "inflight", "tools", "think", "idle", "prune", "warm"].map((k) => [
      k,
      { enabled: k === name },
    ]),
  );

function policy(config: AgentPolicyOptions["config"], extra: Partial<AgentPolicyOptions> = {}) {
  const logs: string[] = [];
  const decisions: string[] = [];
  const p = createAgentPolicy({
    config,
    registry: new Registry(),
    log: (l) => logs.push(l),
    decisionLog: (l) => decisions.push(l),
    ...extra,
  });
  p.observe(joined(0));
  return { p, logs, decisions };
}

describe("a decision is applied whole or not at all", () => {
  it("a rule that throws after it pinned one group sends nothing, holds nothing and logs no decision", () => {
    // The pins rule asks the tenant's caps once per TTL group: the second ask throws.
    let asks = 0;
    let failing = true;
    const tenantCaps = () => {
      asks++;
      if (failing && asks === 2) throw new Error("caps store unreachable");
      return null;
    };
    const { p, logs, decisions } = policy(ONLY("pins"), { tenantCaps });
    const chain = chainOf(8);
    p.observe(started(1, "s", { tenant: "t1" }));
    const markers = {
      breakpoints: [
        { tokens: 2 * PAGE, ttlSeconds: 3600, at: "system" },
        { tokens: 6 * PAGE, ttlSeconds: 300, at: "message[0]" },
      ],
      errors: [],
    };
    const before = decisions.length;
    const out = p.observe(finished(2, "s", chain, { markers }));
    expect(asks).toBe(2);
    expect(out).toEqual([]);
    expect(p.state.budget.used("w0")).toBe(0);
    expect(decisions.slice(before).filter((l) => l.includes('"cache_markers"'))).toEqual([]);
    expect(logs.find((l) => l.includes("cache_markers threw on TurnFinished"))).toMatch(
      /caps store unreachable[\s\S]*nothing of its decision applied/,
    );
    // The same turn again, the caps answering: both groups go out, as one decision.
    failing = false;
    const again = p.observe(finished(3, "s", chain, { markers }));
    expect(again.map((c) => c.command)).toEqual([
      { type: "Cache", block_hashes: chain.slice(0, 2), pin: true, ttl_seconds: 3600 },
      { type: "Cache", block_hashes: chain.slice(2, 6), pin: true, ttl_seconds: 300 },
    ]);
    expect(p.state.budget.used("w0")).toBe(6);
  });

  it("a rule that throws between two commands sends neither; the rules after it still decide", () => {
    let calls = 0;
    const storageKeys = (tokens: number[], pageSize: number) => {
      if (++calls === 2) throw new Error("no keys");
      return Array.from({ length: Math.floor(tokens.length / pageSize) }, (_, i) =>
        `${tokens.length}-${i}`.padStart(64, "0"),
      );
    };
    const config = {
      ...ONLY("warm"),
      warm: { enabled: true, storage: true, maxPrefixes: 2 },
      pins: { enabled: true },
    };
    const { p, logs } = policy(config, { storageKeys });
    const bp = (n: number) => ({
      breakpoints: [{ tokens: n * PAGE, ttlSeconds: 3600, at: "system" }],
      errors: [],
    });
    p.observe(finished(1, "a", chainOf(4, 100n), { markers: bp(2) }));
    p.observe(finished(2, "b", chainOf(4, 200n), { markers: bp(3) }));
    expect(p.observe(joined(3, "w1"))).toEqual([]);
    expect(logs.some((l) => l.includes("warm threw on WorkerJoined"))).toBe(true);
    // Its state is as it was: the next join warms both prefixes.
    const out = p.observe(joined(4, "w2"));
    expect(out.map((c) => c.command.type)).toEqual(["Warm", "Warm"]);
  });
});

describe("views are immutable", () => {
  it("a session's view, its lease and its tool wait are frozen; a change replaces the view", () => {
    const { p } = policy({ ...ONLY("tools") });
    p.observe(started(1, "s"));
    const first = p.state.sessions.get("s");
    p.observe(
      finished(2, "s", chainOf(4), {
        finishReason: "tool_calls",
        toolCalls: [{ id: "c1", name: "grep" }],
      }),
    );
    const s = p.state.sessions.get("s");
    expect(s).not.toBe(first);
    expect(Object.isFrozen(s)).toBe(true);
    expect(Object.isFrozen(s?.tool)).toBe(true);
    expect(() => {
      (s as { worker: string | null }).worker = "w9";
    }).toThrow(TypeError);
    expect(p.state.sessions.get("s")?.worker).toBe("w0");
  });
});

function bareState(): PolicyState {
  const cfg = policiesConfigSchema.parse({});
  return {
    cfg,
    sessions: new Map(),
    budget: new PinBudget(8, null),
    pageSizes: new Map([["w0", PAGE]]),
    programDecisions: new Map(),
    blockOwners: new BlockOwners(1024),
    durations: new DurationModel(cfg.tools),
    own: new Map([["r", 0]]),
    maxSessions: 3,
    storageKeys: () => [],
    tenantCaps: () => null,
  };
}

describe("a transaction", () => {
  it("reads its own steps; the state changes only at commit, in the order recorded", () => {
    const st = bareState();
    for (const id of ["a", "b"]) st.sessions.set(id, newSessionView(id, 0));
    st.budget.hold("w0", [1n, 2n], {
      session: "a",
      kind: "marker",
      ttlSeconds: null,
      expiresAt: null,
    });
    const guards = new CommandGuards({ commandsPerSecond: 1, burst: 1, coalesceMs: 1000 });
    const tx = new Tx<number>(st, guards, "r", 10);
    expect(tx.release("w0", [1n], "a", "marker")).toEqual([1n]);
    tx.hold("w0", [3n, 4n], { session: "b", kind: "tool", ttlSeconds: 5, expiresAt: 5010 });
    tx.session("a");
    tx.patch("b", { worker: "w0" });
    tx.session("c");
    tx.setOwn(7);
    const pc: PolicyCommand = {
      worker: "w0",
      reason: "r",
      command: { type: "Cache", block_hashes: [3n], pin: true },
    };
    expect(tx.emit("r", pc)).toBe(true);
    // The bucket holds one token, taken by the command before it in this transaction.
    expect(tx.emit("r", { ...pc, command: { type: "Cache", block_hashes: [4n], pin: true } })).toBe(
      false,
    );
    expect([
      tx.budget.used("w0"),
      tx.own,
      [...tx.sessions.keys()],
      tx.sessions.get("b")?.worker,
    ]).toEqual([3, 7, ["b", "a", "c"], "w0"]);
    expect([
      st.budget.used("w0"),
      st.own.get("r"),
      [...st.sessions.keys()],
      st.sessions.get("b")?.worker,
    ]).toEqual([2, 0, ["a", "b"], null]);
    const out: PolicyCommand[] = [];
    const outlet: Outlet = {
      guards,
      metrics: new PolicyMetrics(),
      log: () => undefined,
      decisionLog: null,
      out,
      acks: new Map(),
    };
    commit(tx, st, outlet);
    expect([
      st.budget.used("w0"),
      st.own.get("r"),
      [...st.sessions.keys()],
      st.sessions.get("b")?.worker,
    ]).toEqual([3, 7, ["b", "a", "c"], "w0"]);
    expect(out).toEqual([pc]);
    expect(guards.check("w0", null, false, 10)).toBe("rate_limited");
  });

  it("a new session past the bound forgets the least recently seen one, in the view and at commit", () => {
    const st = bareState();
    for (const id of ["a", "b", "c"]) st.sessions.set(id, newSessionView(id, 0));
    const tx = new Tx(
      st,
      new CommandGuards({ commandsPerSecond: 1, burst: 1, coalesceMs: 0 }),
      "r",
      1,
    );
    tx.session("a");
    tx.session("d");
    expect([...tx.sessions.keys()]).toEqual(["c", "a", "d"]);
    expect(tx.sessions.size).toBe(3);
    commit(tx, st, {
      guards: new CommandGuards({ commandsPerSecond: 1, burst: 1, coalesceMs: 0 }),
      metrics: new PolicyMetrics(),
      log: () => undefined,
      decisionLog: null,
      out: [],
      acks: new Map(),
    });
    expect([...st.sessions.keys()]).toEqual(["c", "a", "d"]);
  });
});

describe("the guards' dry verdict", () => {
  it("agrees with checking each command in turn, on random sequences", () => {
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 200; round++) {
      const o = {
        commandsPerSecond: 1 + Math.floor(rnd() * 3),
        burst: 1 + Math.floor(rnd() * 3),
        coalesceMs: rnd() < 0.5 ? 0 : 1000,
      };
      const live = new CommandGuards(o);
      const dry = new CommandGuards(o);
      let t = 0;
      for (let batch = 0; batch < 6; batch++) {
        t += Math.floor(rnd() * 1500);
        const pending: { worker: string; key: string | null }[] = [];
        const sent: { worker: string; key: string | null; v: string }[] = [];
        for (let i = 0; i < 4; i++) {
          const c = {
            worker: rnd() < 0.5 ? "w0" : "w1",
            key: rnd() < 0.3 ? null : `k${Math.floor(rnd() * 3)}`,
            essential: rnd() < 0.2,
          };
          const v = dry.verdict(c.worker, c.key, c.essential, t, pending);
          expect(v).toBe(live.check(c.worker, c.key, c.essential, t));
          if (v === "send") pending.push(c);
          sent.push({ ...c, v });
        }
        for (const c of sent) if (c.v !== "coalesced") dry.take(c.worker, c.key, t, c.v === "send");
      }
    }
  });
});
