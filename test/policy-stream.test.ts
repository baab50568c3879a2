// The agent policy on seeded random streams of everything a gateway hands it (test/helpers/
// policy-stream.ts), every rule on, under several budgets, caps and guard settings. What must hold
// on every stream: no rule throws; the budget view never passes its budget (streams without
// session records: nothing but this policy's own asks fills it); no block is unpinned more often
// than it was pinned; a lease is renewed or revoked only after its Pause, a tool offload ended only
// after its ToolStart was answered with an epoch; and the same stream gives the same commands.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { Observation } from "../src/contract/observations.js";
import type { PolicyCommand } from "../src/contract/policy.js";
import { type AgentPolicyOptions, createAgentPolicy } from "../src/policy/agent-policy.js";
import { type Fed, feedStream } from "./helpers/policy-stream.js";

const SEEDS = 120;
const STEPS = 400;

function configOf(seed: number): NonNullable<AgentPolicyOptions["config"]> {
  return {
    pins: {
      enabled: true,
      budgetBlocks: [12, 24, 48][seed % 3],
      ...(seed & 4 ? { sessionCapBlocks: 10 } : {}),
    },
    inflight: { enabled: (seed & 8) !== 0, minBlocks: 1 },
    tools: { enabled: true },
    think: { enabled: true },
    idle: { enabled: true, deviceBlocks: 40 },
    prune: { enabled: true },
    warm: { enabled: true, storage: true },
    ...(seed & 16 ? { guards: { commandsPerSecond: 1, burst: 3, coalesceMs: 5000 } } : {}),
  };
}

function run(seed: number, stored: boolean) {
  const logs: string[] = [];
  const config = configOf(seed);
  const p = createAgentPolicy({
    config,
    registry: new Registry(),
    log: (l) => logs.push(l),
    decisionLog: () => undefined,
    tenantCaps: (t) => (t === "t1" ? { perSession: 8, perTenant: 16 } : null),
  });
  const budget = config.pins?.budgetBlocks ?? 0;
  let over = 0;
  const observe = (o: Observation) => {
    const out = p.observe(o);
    for (const w of ["w0", "w1"]) if (p.state.budget.used(w) > budget) over++;
    return out;
  };
  return { fed: feedStream(seed, observe, { steps: STEPS, stored }), logs, over };
}

/** Blocks unpinned more often than pinned, per worker, as the commands went out. */
function unpinnedPastPins(fed: readonly Fed[]): string[] {
  const pins = new Map<string, number>();
  const bad: string[] = [];
  for (const { out } of fed) {
    for (const pc of out) {
      if (pc.command.type !== "Cache") continue;
      for (const h of pc.command.block_hashes) {
        const k = `${pc.worker}/${h}`;
        const n = (pins.get(k) ?? 0) + (pc.command.pin ? 1 : -1);
        pins.set(k, n);
        if (n < 0) bad.push(`${k} by ${pc.reason}`);
      }
    }
  }
  return bad;
}

/** Lease and tool-offload commands that name what was never opened. */
function unopened(fed: readonly Fed[]): string[] {
  const leases = new Set<string>();
  const epochs = new Set<string>();
  const bad: string[] = [];
  for (const { ob, out } of fed) {
    if (ob.type === "CommandAcked" && ob.command?.type === "ToolStart" && ob.epoch != null)
      epochs.add(`${ob.command.session_id}/${ob.epoch}`);
    for (const { command: c } of out) {
      if (c.type === "Pause") leases.add(c.lease_id);
      if ((c.type === "RenewLease" || c.type === "RevokeLease") && !leases.has(c.lease_id))
        bad.push(`${c.type} ${c.lease_id}`);
      if (c.type === "ToolEnd" && !epochs.has(`${c.session_id}/${c.epoch}`))
        bad.push(`ToolEnd ${c.session_id}/${c.epoch}`);
    }
  }
  return bad;
}

const commandsOf = (fed: readonly Fed[]) =>
  JSON.stringify(
    fed.map((f) => f.out.map((c: PolicyCommand) => [c.worker, c.command, c.reason])),
    (_k, v) => (typeof v === "bigint" ? `${v}` : v),
  );

describe("the agent policy on random streams", () => {
  it("streams without session records: no throw, the budget view within its budget, pins before unpins, leases and offloads opened before they are ended", () => {
    let commands = 0;
    const kinds = new Set<string>();
    for (let seed = 1; seed <= SEEDS; seed++) {
      const { fed, logs, over } = run(seed, false);
      for (const f of fed) for (const c of f.out) kinds.add(c.command.type);
      commands += fed.reduce((n, f) => n + f.out.length, 0);
      expect(
        logs.filter((l) => l.includes(" threw on ")),
        `seed ${seed}`,
      ).toEqual([]);
      expect(over, `seed ${seed}`).toBe(0);
      expect(
        logs.filter((l) => l.includes("over its budget")),
        `seed ${seed}`,
      ).toEqual([]);
      expect(unpinnedPastPins(fed), `seed ${seed}`).toEqual([]);
      expect(unopened(fed), `seed ${seed}`).toEqual([]);
    }
    // Not vacuous: the streams drove every command the rules send.
    expect([...kinds].sort()).toEqual([
      "Cache",
      "Pause",
      "Prune",
      "RenewLease",
      "RevokeLease",
      "Think",
      "ToolEnd",
      "ToolStart",
      "Warm",
    ]);
    expect(commands).toBeGreaterThan(SEEDS * 50);
  });

  it("streams with session records: no rule throws, and a view past its budget is only ever one a record filled", () => {
    for (let seed = 1; seed <= SEEDS / 2; seed++) {
      const { logs } = run(seed, true);
      expect(
        logs.filter((l) => l.includes(" threw on ")),
        `seed ${seed}`,
      ).toEqual([]);
      expect(
        logs.filter((l) => l.includes("a bug:")),
        `seed ${seed}`,
      ).toEqual([]);
    }
  });

  it("the same stream gives the same commands: decisions are functions of what the policy was handed", () => {
    for (const seed of [3, 11, 26])
      expect(commandsOf(run(seed, true).fed)).toBe(commandsOf(run(seed, true).fed));
  });
});
