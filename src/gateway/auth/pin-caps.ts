// A tenant's pin caps: blocks one session, and all the tenant's sessions together, may hold pinned
// at once. The agent policy applies them itself before it pins (policy/pin-caps.ts); this is the
// backstop for holds its view lacks (another replica's): a pin command for a capped tenant's
// session goes out trimmed to what the caps leave, or not at all, counted either way. Only what is
// new costs room: a block the session already holds pinned on that worker (a refresh) is free, as
// the policy counts it, so a session at its cap keeps its refreshes. Pinned blocks are counted from
// the session records this replica holds, plus the pins of the same batch not recorded yet.
import { Counter, type Registry } from "prom-client";
import type { PolicyCommand } from "../../contract/policy.js";
import { holdsOf, PIN_KINDS } from "../sessions/holds/holds.js";
import type { SessionRecord } from "../sessions/holds/record.js";
import type { TenantConfig } from "./config.js";

/** Distinct `worker block` pairs a session's holds pin (a refresh re-pins a block; it counts once). */
function pinnedIn(r: SessionRecord): Set<string> {
  const blocks = new Set<string>();
  for (const h of holdsOf(r))
    if (PIN_KINDS.has(h.kind)) for (const b of h.blocks) blocks.add(`${h.worker} ${b}`);
  return blocks;
}

/** What a capped session holds and may still add; `held` grows with the batch's pins. */
interface Room {
  tenant: string;
  held: Set<string>;
  left: number;
}

type Sent = { sent: PolicyCommand[]; dropped: { pc: PolicyCommand; why: string }[] };

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
   * command, by its id, with the longest prefix of its blocks whose new ones fit) or not at all
   * (`dropped`, with why, to be reported to the policy as a command never sent).
   */
  limit(batch: readonly PolicyCommand[]): Sent {
    // Blocks each session's pins in this batch added, per tenant, before the records show them.
    const added = new Map<string, Set<string>>();
    const out: Sent = { sent: [], dropped: [] };
    for (const pc of batch) {
      const c = pc.command;
      if (c.type !== "Cache" || !c.pin || !pc.sessionId) {
        out.sent.push(pc);
        continue;
      }
      const room = this.room(pc.sessionId, added);
      if (room === null) {
        out.sent.push(pc);
        continue;
      }
      const keys = c.block_hashes.map((b) => `${pc.worker} ${b}`);
      let fit = 0;
      let left = room.left;
      for (const k of keys) {
        if (!room.held.has(k)) {
          if (left <= 0) break;
          left--;
        }
        fit++;
      }
      const mine = added.get(pc.sessionId) ?? new Set<string>();
      added.set(pc.sessionId, mine);
      for (const k of keys.slice(0, fit)) if (!room.held.has(k)) mine.add(k);
      if (fit === keys.length) out.sent.push(pc);
      else if (fit === 0) {
        this.trimmed.inc({ tenant: room.tenant, outcome: "dropped" });
        out.dropped.push({ pc, why: `over tenant ${room.tenant}'s pin cap` });
      } else {
        this.trimmed.inc({ tenant: room.tenant, outcome: "trimmed" });
        const block_hashes = c.block_hashes.slice(0, fit);
        out.sent.push({ ...pc, command: { ...c, block_hashes } });
      }
    }
    return out;
  }

  /** What the session holds and may still add under its tenant's caps; null when none apply. */
  private room(sessionId: string, added: ReadonlyMap<string, Set<string>>): Room | null {
    const all = [...this.records()];
    const session = all.find((r) => r.id === sessionId) ?? null;
    const tenant = session?.tenant;
    const t = tenant ? this.tenants.get(tenant) : undefined;
    if (
      !tenant ||
      !t ||
      (t.maxPinnedBlocks === undefined && t.maxPinnedBlocksPerSession === undefined)
    )
      return null;
    const held = new Set([...(session ? pinnedIn(session) : []), ...(added.get(sessionId) ?? [])]);
    let left = Number.POSITIVE_INFINITY;
    if (t.maxPinnedBlocksPerSession !== undefined) left = t.maxPinnedBlocksPerSession - held.size;
    if (t.maxPinnedBlocks !== undefined) {
      let used = 0;
      for (const r of all)
        if (r.tenant === tenant)
          used += r.id === sessionId ? held.size : pinnedIn(r).size + (added.get(r.id)?.size ?? 0);
      left = Math.min(left, t.maxPinnedBlocks - used);
    }
    return { tenant, held, left };
  }
}
