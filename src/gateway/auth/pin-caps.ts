// A tenant's pin caps: blocks one session, and all the tenant's sessions together, may hold pinned
// at once. The agent policy applies them itself before it pins (policy/pin-caps.ts); this is the
// backstop for holds its view lacks (another replica's): a pin command for a capped tenant's
// session goes out trimmed to what the caps leave, or not at all, counted either way. Pinned blocks are counted from the session records this replica holds
// (plus the pins of the same batch not recorded yet).
import { Counter, type Registry } from "prom-client";
import type { PolicyCommand } from "../../contract/policy.js";
import { holdsOf, PIN_KINDS } from "../holds/holds.js";
import type { SessionRecord } from "../holds/record.js";
import type { TenantConfig } from "./config.js";

/** Distinct blocks a session's holds pin on each worker (a refresh re-pins a block; it counts once). */
function pinnedIn(r: SessionRecord): number {
  const blocks = new Set<string>();
  for (const h of holdsOf(r))
    if (PIN_KINDS.has(h.kind)) for (const b of h.blocks) blocks.add(`${h.worker} ${b}`);
  return blocks.size;
}

export class PinCaps {
  private readonly trimmed: Counter<"tenant" | "outcome">;

  constructor(
    private readonly tenants: ReadonlyMap<string, TenantConfig>,
    private readonly records: () => Iterable<SessionRecord>,
    registry: Registry,
  ) {
    this.trimmed = new Counter({
      name: "kvctl_gateway_pin_cap_total",
      help: "Pin commands cut down (trimmed) or dropped by a tenant's pin caps",
      labelNames: ["tenant", "outcome"],
      registers: [registry],
    });
  }

  /**
   * Applies the caps to one batch of commands, in order: each goes out whole, trimmed (the same
   * command, by its id, with fewer blocks) or not at all (`dropped`, with why, to be reported to the
   * policy as a command never sent).
   */
  limit(batch: readonly PolicyCommand[]): {
    sent: PolicyCommand[];
    dropped: { pc: PolicyCommand; why: string }[];
  } {
    const extra = new Map<string, number>();
    const sent: PolicyCommand[] = [];
    const dropped: { pc: PolicyCommand; why: string }[] = [];
    for (const pc of batch) {
      const c = pc.command;
      if (c.type !== "Cache" || !c.pin || !pc.sessionId) {
        sent.push(pc);
        continue;
      }
      const room = this.room(pc.sessionId, extra);
      if (room === null || room.left >= c.block_hashes.length) {
        if (room) extra.set(pc.sessionId, (extra.get(pc.sessionId) ?? 0) + c.block_hashes.length);
        sent.push(pc);
        continue;
      }
      if (room.left <= 0) {
        this.trimmed.inc({ tenant: room.tenant, outcome: "dropped" });
        dropped.push({ pc, why: `over tenant ${room.tenant}'s pin cap` });
        continue;
      }
      this.trimmed.inc({ tenant: room.tenant, outcome: "trimmed" });
      extra.set(pc.sessionId, (extra.get(pc.sessionId) ?? 0) + room.left);
      sent.push({ ...pc, command: { ...c, block_hashes: c.block_hashes.slice(0, room.left) } });
    }
    return { sent, dropped };
  }

  /** Blocks the session may still pin under its tenant's caps; null when its tenant has none. */
  private room(
    sessionId: string,
    extra: ReadonlyMap<string, number>,
  ): { tenant: string; left: number } | null {
    let session: SessionRecord | null = null;
    const all = [...this.records()];
    for (const r of all) if (r.id === sessionId) session = r;
    const tenant = session?.tenant;
    const t = tenant ? this.tenants.get(tenant) : undefined;
    if (
      !tenant ||
      !t ||
      (t.maxPinnedBlocks === undefined && t.maxPinnedBlocksPerSession === undefined)
    )
      return null;
    let left = Number.POSITIVE_INFINITY;
    if (t.maxPinnedBlocksPerSession !== undefined && session)
      left = t.maxPinnedBlocksPerSession - pinnedIn(session) - (extra.get(sessionId) ?? 0);
    if (t.maxPinnedBlocks !== undefined) {
      let used = 0;
      for (const r of all) if (r.tenant === tenant) used += pinnedIn(r) + (extra.get(r.id) ?? 0);
      left = Math.min(left, t.maxPinnedBlocks - used);
    }
    return { tenant, left };
  }
}
