// No tenant's decision evicts another's cache. Every command that removes or demotes blocks (a
// Prune's subtree, a Think's purge or transient mark, a Pause's or ToolStart's move to host, a
// RevokeLease's purge) goes out limited to blocks no other tenant's traffic uses (block-use.ts): a
// Prune moves down its session's chain to the first block only its tenant stands on, or is
// dropped; a Think, Pause or ToolStart keeps only such blocks, or is dropped; a RevokeLease whose
// lease holds a block another tenant uses releases the lease without the purge (the shared blocks
// are released by reference, left to the worker's own eviction). Within one tenant the policy's
// own rules decide. A trimmed command keeps its id, so its ack carries what was sent.
import { Counter, type Registry } from "prom-client";
import type { PolicyCommand } from "../../contract/policy.js";
import type { Command } from "../../protocol/index.js";
import { holdsOf } from "../sessions/holds/holds.js";
import type { SessionRecord } from "../sessions/holds/record.js";
import type { BlockUse } from "./block-use.js";

export type Guarded = { pc: PolicyCommand } | { dropped: string };

export class EvictGuard {
  private readonly limited: Counter<"type" | "outcome">;

  constructor(
    private readonly use: BlockUse,
    private readonly records: () => Iterable<SessionRecord>,
    registry: Registry,
  ) {
    this.limited = new Counter({
      name: "kvctl_gateway_evictions_limited_total",
      help:
        "Eviction commands (Prune, Think, Pause, ToolStart, RevokeLease) cut down (trimmed) " +
        "or dropped because another tenant's traffic uses their blocks",
      labelNames: ["type", "outcome"],
      registers: [registry],
    });
  }

  /** The command as it may go out: unchanged, trimmed, or dropped with why. */
  check(pc: PolicyCommand): Guarded {
    const c = pc.command;
    const out = this.limit(pc, c);
    if ("dropped" in out) this.limited.inc({ type: c.type, outcome: "dropped" });
    else if (out.pc !== pc) this.limited.inc({ type: c.type, outcome: "trimmed" });
    return out;
  }

  private limit(pc: PolicyCommand, c: Command): Guarded {
    const self = pc.sessionId ?? null;
    // A session this table has not seen stands as no tenant: every tenant's blocks are others'.
    const tenant = (self === null ? null : this.use.tenantOf(self)) ?? "";
    const mine = (h: bigint | string) => !this.use.usedByOthers(pc.worker, h, tenant);
    switch (c.type) {
      case "Prune": {
        if (mine(c.after_block_hash)) return { pc };
        // The blocks below it that only this session stands on: prune after the first of them.
        const chain = self === null ? [] : this.use.chainOf(self, pc.worker);
        const from = chain.indexOf(c.after_block_hash);
        const k = from < 0 ? -1 : chain.findIndex((h, i) => i > from && mine(h));
        if (k < 0 || k === chain.length - 1)
          return { dropped: "another tenant's traffic uses the blocks it would remove" };
        return { pc: { ...pc, command: { ...c, after_block_hash: chain[k] } } };
      }
      case "Think":
      case "Pause":
      case "ToolStart": {
        const kept = c.block_hashes.filter(mine);
        if (kept.length === c.block_hashes.length) return { pc };
        if (!kept.length) return { dropped: "another tenant's traffic uses every block it names" };
        return { pc: { ...pc, command: { ...c, block_hashes: kept } } };
      }
      case "RevokeLease": {
        if (c.purge === false) return { pc };
        const blocks = this.leaseBlocks(c.lease_id);
        if (blocks?.every(mine)) return { pc };
        return { pc: { ...pc, command: { ...c, purge: false } } };
      }
      default:
        return { pc };
    }
  }

  /** The blocks a lease holds, from the records this replica holds; null when none names it. */
  private leaseBlocks(leaseId: string): string[] | null {
    for (const r of this.records())
      for (const h of holdsOf(r)) if (h.kind === "lease" && h.leaseId === leaseId) return h.blocks;
    return null;
  }
}
