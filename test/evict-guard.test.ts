// The eviction guard against the block-use table, case by case: what each evicting command of
// tenant B's may still remove when tenant A's sessions (on any replica) or recent sessionless
// requests stand on its blocks; within one tenant the policy's own rules decide. The real-worker effect is in test/gateway-tenants.test.ts.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { PolicyCommand } from "../src/contract/policy.js";
import { BlockUse, SESSIONLESS_WINDOW_MS } from "../src/gateway/auth/block-use.js";
import { EvictGuard } from "../src/gateway/auth/evict-guard.js";
import { newSessionRecord, type SessionRecord } from "../src/gateway/sessions/holds/record.js";
import type { Command } from "../src/protocol/index.js";

const TTL_MS = 3_600_000;
// B's session chain: blocks 1-3 are A's system prompt, 4-6 B's own branch.
const B_CHAIN = [1n, 2n, 3n, 4n, 5n, 6n];
const A_CHAIN = [1n, 2n, 3n, 7n, 8n];

interface Bed {
  use: BlockUse;
  guard: EvictGuard;
  clock: { t: number; now(): number };
  records: SessionRecord[];
}

function bed(): Bed {
  const clock = { t: 1_000_000, now: () => clock.t };
  const use = new BlockUse({ clock, sessionTtlMs: TTL_MS, registry: new Registry() });
  const records: SessionRecord[] = [];
  return { use, guard: new EvictGuard(use, () => records, new Registry()), clock, records };
}

function leaseOf(b: Bed, session: string, leaseId: string, blocks: bigint[]): void {
  const r = newSessionRecord(session, b.clock.t);
  r.holds = [
    {
      id: `h-${leaseId}`,
      kind: "lease",
      worker: "w0",
      incarnation: null,
      blocks: blocks.map(String),
      releasing: [],
      leaseId,
      toolSession: null,
      epoch: null,
      replica: "r",
      ttlSeconds: null,
      expiresMs: null,
      atMs: b.clock.t,
      state: "held",
    },
  ];
  b.records.push(r);
}

const pc = (command: Command, sessionId: string | null = "b/s"): PolicyCommand => ({
  worker: "w0",
  sessionId,
  reason: "test",
  id: "c1",
  command,
});

type Setup = (b: Bed) => void;
const bSession: Setup = (b) => b.use.session("b/s", "b", "w0", B_CHAIN, b.clock.t);
const aSessionless: Setup = (b) =>
  b.use.sessionless("a", "w0", A_CHAIN, b.clock.t, SESSIONLESS_WINDOW_MS);
const aSession: Setup = (b) => b.use.session("a/s", "a", "w0", A_CHAIN, b.clock.t);
const later =
  (ms: number): Setup =>
  (b) => {
    b.clock.t += ms;
  };

// Each case: who stood where, the command B's session sends, what may go out ("dropped": nothing).
const CASES: [string, Setup[], Command, Command | "dropped"][] = [
  [
    "prune at A's sessionless prefix moves down to B's own branch",
    [bSession, aSessionless],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 4n },
  ],
  [
    "prune at A's session's prefix moves down to B's own branch",
    [bSession, aSession],
    { type: "Prune", after_block_hash: 2n },
    { type: "Prune", after_block_hash: 4n },
  ],
  [
    "prune at B's own block goes out unchanged",
    [bSession, aSession],
    { type: "Prune", after_block_hash: 4n },
    { type: "Prune", after_block_hash: 4n },
  ],
  [
    "prune at a block A uses, with no chain of B's known: not sent",
    [aSessionless],
    { type: "Prune", after_block_hash: 1n },
    "dropped",
  ],
  [
    "prune whose session is all shared but its last block: not sent",
    [(b) => b.use.session("b/s", "b", "w0", [1n, 2n, 3n, 9n], b.clock.t), aSession],
    { type: "Prune", after_block_hash: 1n },
    "dropped",
  ],
  [
    "prune once A's sessionless window has passed goes out unchanged",
    [bSession, aSessionless, later(SESSIONLESS_WINDOW_MS + 1)],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "prune once A's session record has expired goes out unchanged",
    [bSession, aSession, later(TTL_MS + 1)],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "prune once A's session is forgotten (its record deleted) goes out unchanged",
    [bSession, aSession, (b) => b.use.forget("a/s")],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "prune at a block A's session left (its chain moved on) goes out unchanged",
    [bSession, aSession, (b) => b.use.session("a/s", "a", "w0", [10n, 11n], b.clock.t)],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "B's own other session and sessionless requests leave B's prune to the policy",
    [
      bSession,
      (b) => b.use.session("b/t", "b", "w0", A_CHAIN, b.clock.t),
      (b) => b.use.sessionless("b", "w0", A_CHAIN, b.clock.t, SESSIONLESS_WINDOW_MS),
    ],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "a session this replica never saw stands as no tenant: A's blocks are still protected",
    [aSession],
    { type: "Think", block_hashes: [1n, 2n], transient: true },
    "dropped",
  ],
  [
    "the same block hash on another worker protects nothing here",
    [bSession, (b) => b.use.sessionless("a", "w1", A_CHAIN, b.clock.t, SESSIONLESS_WINDOW_MS)],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "B's own earlier turns never protect a block from B",
    [bSession],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 1n },
  ],
  [
    "a sessionless request asking for a 1 h cache keeps its blocks past 5 minutes",
    [bSession, (b) => b.use.sessionless("a", "w0", A_CHAIN, b.clock.t, 3_600_000), later(600_000)],
    { type: "Prune", after_block_hash: 1n },
    { type: "Prune", after_block_hash: 4n },
  ],
  [
    "transient mark keeps only B's own blocks",
    [bSession, aSession],
    { type: "Think", block_hashes: [3n, 4n, 5n], transient: true },
    { type: "Think", block_hashes: [4n, 5n], transient: true },
  ],
  [
    "purge (Think) of blocks A uses only: not sent",
    [bSession, aSessionless],
    { type: "Think", block_hashes: [1n, 2n], transient: false },
    "dropped",
  ],
  [
    "demote (Pause) keeps only B's own blocks",
    [bSession, aSession],
    { type: "Pause", block_hashes: B_CHAIN, ttl_seconds: 60, lease_id: "l1" },
    { type: "Pause", block_hashes: [4n, 5n, 6n], ttl_seconds: 60, lease_id: "l1" },
  ],
  [
    "demote (Pause) of A's prefix only: not sent",
    [bSession, aSessionless],
    { type: "Pause", block_hashes: [1n, 2n, 3n], ttl_seconds: 60, lease_id: "l1" },
    "dropped",
  ],
  [
    "a tool call's offload (ToolStart) keeps only B's own blocks on the device's way out",
    [bSession, aSessionless],
    { type: "ToolStart", session_id: "b/s", block_hashes: B_CHAIN },
    { type: "ToolStart", session_id: "b/s", block_hashes: [4n, 5n, 6n] },
  ],
  [
    "revoke with purge of a lease over a block A uses releases without the purge",
    [bSession, aSession, (b) => leaseOf(b, "b/s", "l1", B_CHAIN)],
    { type: "RevokeLease", lease_id: "l1" },
    { type: "RevokeLease", lease_id: "l1", purge: false },
  ],
  [
    "revoke with purge of a lease over B's own blocks goes out unchanged",
    [bSession, aSession, (b) => leaseOf(b, "b/s", "l1", [4n, 5n, 6n])],
    { type: "RevokeLease", lease_id: "l1", purge: true },
    { type: "RevokeLease", lease_id: "l1", purge: true },
  ],
  [
    "revoke with purge of a lease no record here names releases without the purge",
    [bSession],
    { type: "RevokeLease", lease_id: "elsewhere" },
    { type: "RevokeLease", lease_id: "elsewhere", purge: false },
  ],
  [
    "revoke without purge goes out unchanged",
    [bSession, aSession, (b) => leaseOf(b, "b/s", "l1", B_CHAIN)],
    { type: "RevokeLease", lease_id: "l1", purge: false },
    { type: "RevokeLease", lease_id: "l1", purge: false },
  ],
  [
    "an unpin releases by reference and goes out unchanged",
    [bSession, aSession],
    { type: "Cache", block_hashes: [1n, 2n], pin: false },
    { type: "Cache", block_hashes: [1n, 2n], pin: false },
  ],
];

describe("the eviction guard", () => {
  it.each(CASES)("%s", (_name, setup, command, expected) => {
    const b = bed();
    for (const s of setup) s(b);
    const out = b.guard.check(pc(command));
    if (expected === "dropped") expect(out).toEqual({ dropped: expect.any(String) });
    else {
      expect("pc" in out && out.pc.command).toEqual(expected);
      // A cut-down command keeps its id (its ack carries what was sent).
      expect("pc" in out && out.pc.id).toBe("c1");
    }
  });

  it("counts what it trimmed and dropped, by type", async () => {
    const registry = new Registry();
    const clock = { now: () => 0 };
    const use = new BlockUse({ clock, sessionTtlMs: 0, registry });
    const guard = new EvictGuard(use, () => [], registry);
    use.session("b/s", "b", "w0", B_CHAIN, 0);
    use.session("a/s", "a", "w0", A_CHAIN, 0);
    guard.check(pc({ type: "Prune", after_block_hash: 1n }));
    guard.check(pc({ type: "Think", block_hashes: [1n], transient: true }));
    guard.check(pc({ type: "Prune", after_block_hash: 5n }));
    const text = await registry.metrics();
    expect(text).toContain(
      'kvctl_gateway_evictions_limited_total{type="Prune",outcome="trimmed"} 1',
    );
    expect(text).toContain(
      'kvctl_gateway_evictions_limited_total{type="Think",outcome="dropped"} 1',
    );
    expect(text).toContain("kvctl_gateway_block_use_sessions 2");
  });
});
