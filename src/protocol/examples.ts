// One valid example of every command, as the contract's reader would write it. Used by tests,
// demos and as a cross-check for the Python rendering of the same contract.
import type { Command, CommandType } from "./commands.js";

export const EXAMPLE_COMMANDS: { [T in CommandType]: Extract<Command, { type: T }> } = {
  Cache: {
    type: "Cache",
    block_hashes: [111n, -6917529027641081856n, 9223372036854775807n],
    pin: true,
    ttl_seconds: 300,
  },
  Prune: { type: "Prune", after_block_hash: -9223372036854775808n, force: false },
  Think: { type: "Think", block_hashes: [42n, 43n], transient: true },
  Pause: { type: "Pause", block_hashes: [111n, 222n], ttl_seconds: 600, lease_id: "lease-1" },
  RenewLease: { type: "RenewLease", lease_id: "lease-1", new_ttl_seconds: 900 },
  RevokeLease: { type: "RevokeLease", lease_id: "lease-1" },
  Warm: {
    type: "Warm",
    block_keys: ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    token_ids: [1, 2, 3, 4],
    target_tier: "CPU_TIER1",
  },
  ToolStart: { type: "ToolStart", session_id: "sess-1", block_hashes: [111n, 222n, 333n] },
  ToolEnd: { type: "ToolEnd", session_id: "sess-1", epoch: 1 },
  Prefetch: {
    type: "Prefetch",
    block_hashes: [111n, 222n, 333n],
    session_id: "sess-1",
    deadline_ms: 2000,
  },
  Inspect: {
    type: "Inspect",
    block_hashes: [111n, 444n],
    session_id: "sess-1",
    lease_id: "lease-1",
  },
};
