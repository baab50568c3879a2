// Idle -> pause; return -> renew; close -> revoke; pressure -> pause the largest idle sessions.
// A session idle past the gateway's idle threshold is demoted to host under a lease (Pause); a
// returning turn renews that lease (RenewLease); close revokes it (RevokeLease: the worker frees
// the blocks, keeping any another session still holds), as does a rewrite that keeps nothing. A
// lease that only gives way (to a new lease of the same session, or preempted for a more valuable
// hold) is released without the purge: the session may come back, and LRU may still have its blocks.
// Under pressure - the worker's device working set past the high watermark of its device blocks -
// the idle sessions holding the most blocks of their own are paused first until it is back under
// the low watermark (hysteresis: the rule trips again only past the high one). The working set is
// the larger of what the worker's KV events put on its GPU (the index: every session's blocks and
// sessionless requests', whichever replica served them) and what this replica's own sessions hold
// unpaused (ahead of the events, which arrive after the turn).
import type { CommandAcked, Observation } from "../../contract/observations.js";
import { commonBlocks, reusableChain, SAFE_ID, type SessionView } from "../session-view.js";
import type { PolicyTx, PolicyView } from "../tx.js";
import { makeRoom } from "./make-room.js";
import { planPressure } from "./pressure.js";
import type { AgentRule } from "./policy.js";

const NAME = "idle";

/**
 * The session's own blocks on the worker: its chain after the longest prefix another session of
 * this replica shares there (system prompt, tools). That prefix stays on host by others' turns and
 * prompt-cache markers; the own tail is what only a lease keeps.
 */
function ownTail(ctx: PolicyView, s: SessionView, worker: string): bigint[] {
  const chain = reusableChain(s);
  let k = 0;
  for (const o of ctx.sessions.values())
    if (o.id !== s.id && o.worker === worker) k = Math.max(k, commonBlocks(chain, o.chain));
  return chain.slice(Math.min(k, chain.length - 1));
}

function holdLease(ctx: PolicyTx, s: SessionView, worker: string, blocks: readonly bigint[]): void {
  const ttl = ctx.cfg.idle.leaseSeconds;
  ctx.hold(worker, blocks, {
    session: s.id,
    kind: "lease",
    ttlSeconds: ttl,
    expiresAt: ctx.now + ttl * 1000,
  });
}

function pause(ctx: PolicyTx, s: SessionView, why: string): boolean {
  if (!s.worker || !s.chain.length) return false;
  if (s.inFlight || s.paused) return false;
  if (s.tool?.mode === "offload") {
    ctx.note(NAME, "skip", "already offloaded for a tool call", { session: s.id });
    return false;
  }
  const worker = s.worker;
  // A lease renewed when the session came back is still held: it goes before the new one (released,
  // not purged: the blocks it held are the new lease's too).
  if (s.lease) s = release(ctx, s, `${why}: the earlier lease goes first`);
  const blocks = ownTail(ctx, s, worker);
  // A lease on part of the tail keeps nothing the session can use (its prefix match stops at the
  // first missing block): all of it, or no pause.
  if (
    !makeRoom(
      ctx,
      s,
      worker,
      blocks,
      { policy: NAME, kind: "lease", share: ctx.cfg.idle.budgetShare },
      release,
    )
  )
    return false;
  // A lease id is never used twice, sent or not.
  const leaseSeq = s.leaseSeq + 1;
  const leaseId = `${SAFE_ID(s.id)}.${leaseSeq}`;
  const id = s.id;
  ctx.patch(id, { leaseSeq });
  const sent = ctx.emit(
    NAME,
    {
      worker,
      sessionId: s.id,
      reason: why,
      command: {
        type: "Pause",
        block_hashes: blocks,
        ttl_seconds: ctx.cfg.idle.leaseSeconds,
        lease_id: leaseId,
      },
    },
    { onAck: (a, ctx) => pauseAcked(ctx, id, worker, leaseId, blocks, a) },
  );
  if (!sent) return false;
  holdLease(ctx, s, worker, blocks);
  ctx.patch(id, { lease: { id: leaseId, worker, blocks, restored: false }, paused: true });
  return true;
}

/** Pause's answer: what the worker did not hold is not the view's; a lease it refused is undone. */
function pauseAcked(
  ctx: PolicyTx,
  id: string,
  worker: string,
  leaseId: string,
  blocks: readonly bigint[],
  a: CommandAcked,
): void {
  // A noop that found none of the blocks holds no lease on the worker (it drops an empty one):
  // a later RevokeLease would name an unknown lease, so the view lets it go here.
  const nothingHeld = a.status === "noop" && (a.missing?.length ?? 0) >= blocks.length;
  if (a.status === "applied" || a.status === "duplicate" || (a.status === "noop" && !nothingHeld))
    return;
  if (a.status === "partial") {
    // What the worker did not hold (gone meanwhile, or past its budget) is not the view's.
    ctx.release(worker, blocks.slice(a.affected ?? 0), id, "lease");
    if ((a.detail ?? "").includes("budget")) ctx.markFull(worker);
    return;
  }
  ctx.release(worker, blocks, id, "lease");
  // This lease, not a later one of the same id (a session closed and opened again counts from 1).
  const l = ctx.sessions.get(id)?.lease;
  if (l?.id === leaseId && l.blocks === blocks) ctx.patch(id, { lease: null, paused: false });
  ctx.note(NAME, "undo", `Pause ${a.status}: ${a.detail ?? ""}`, { session: id });
}

/** Ends a session's lease and purges its blocks (RevokeLease): the session closed, or a rewrite kept none of them. */
export function revoke(ctx: PolicyTx, s: SessionView, why: string): SessionView {
  return endLease(ctx, s, why, true);
}

/** Ends a session's lease and leaves its blocks to the worker's own eviction (RevokeLease, purge
 * false): its hold went to a more valuable one, or a new lease replaces it; the session may come back. */
export function release(ctx: PolicyTx, s: SessionView, why: string): SessionView {
  return endLease(ctx, s, why, false);
}

function endLease(ctx: PolicyTx, s: SessionView, why: string, purge: boolean): SessionView {
  if (!s.lease) return s;
  const command = purge
    ? { type: "RevokeLease" as const, lease_id: s.lease.id }
    : { type: "RevokeLease" as const, lease_id: s.lease.id, purge: false };
  ctx.emit(
    NAME,
    { worker: s.lease.worker, sessionId: s.id, reason: why, command },
    { essential: true },
  );
  ctx.release(s.lease.worker, s.lease.blocks, s.id, "lease");
  return ctx.patch(s.id, { lease: null, paused: false });
}

function renew(ctx: PolicyTx, s: SessionView): void {
  const l = s.lease;
  if (!l) return;
  const id = s.id;
  // Only what the view still holds is held again: blocks a partial answer left out, or whose hold
  // ran out with the lease, are not the lease's on the worker (and holding them would skip the budget).
  const still = ctx.release(l.worker, l.blocks, id, "lease");
  holdLease(ctx, s, l.worker, still);
  ctx.emit(
    NAME,
    {
      worker: l.worker,
      sessionId: id,
      reason: l.restored
        ? "session returned: lease re-issued from the session store"
        : "session returned",
      command: { type: "RenewLease", lease_id: l.id, new_ttl_seconds: ctx.cfg.idle.leaseSeconds },
    },
    {
      coalesce: l.id,
      onAck: (a, ctx) => {
        const now = ctx.sessions.get(id)?.lease;
        if (a.status === "rejected" && now?.id === l.id && now.blocks === l.blocks) {
          ctx.release(l.worker, l.blocks, id, "lease");
          ctx.patch(id, { lease: null });
          ctx.note(NAME, "forget", `lease gone on the worker: ${l.id} ${a.detail ?? ""}`, {
            session: id,
          });
        }
      },
    },
  );
  ctx.patch(id, { paused: false, lease: { ...l, restored: false } });
}

/** Pauses what the pressure plan orders (planPressure), until the working set is under the low mark; the next hysteresis state. */
function relievePressure(
  ctx: PolicyTx,
  worker: string,
  indexed: number | null | undefined,
  tripped: boolean,
): boolean {
  const plan = planPressure({
    worker,
    capBlocks: ctx.cfg.idle.deviceBlocks ?? 0,
    highWatermark: ctx.cfg.idle.highWatermark,
    lowWatermark: ctx.cfg.idle.lowWatermark,
    indexedBlocks: indexed ?? null,
    sessions: [...ctx.sessions.values()].map((s) => ({
      id: s.id,
      worker: s.worker,
      chain: s.chain,
      paused: s.paused,
      inFlight: s.inFlight,
      offloaded: s.tool?.mode === "offload",
    })),
    tripped,
  });
  if (!plan.act) return plan.tripped;
  const cap = ctx.cfg.idle.deviceBlocks;
  let size = plan.seen;
  for (const { session, freed } of plan.order) {
    if (size <= plan.low) break;
    const s = ctx.sessions.get(session);
    if (
      s &&
      pause(
        ctx,
        s,
        `pressure: working set ${size}/${cap} blocks >= ${ctx.cfg.idle.highWatermark}; largest idle session first`,
      )
    )
      size -= freed;
  }
  if (size <= plan.low) return false;
  ctx.note(NAME, "skip", `pressure stays: ${size}/${cap} blocks, no more idle sessions to pause`, {
    worker,
  });
  return true;
}

/** The idle rule; its own state is its hysteresis (the workers past the high mark). */
export const idleRule: AgentRule<ReadonlySet<string>> = {
  name: NAME,
  init: () => new Set(),
  decide(o, ctx) {
    onIdleObservation(o, ctx);
    if (o.type !== "TurnFinished") return;
    const was = ctx.own.has(o.worker);
    const now = relievePressure(ctx, o.worker, o.workerDeviceBlocks, was);
    if (now === was) return;
    const next = new Set(ctx.own);
    if (now) next.add(o.worker);
    else next.delete(o.worker);
    ctx.setOwn(next);
  },
};

function onIdleObservation(o: Observation, ctx: PolicyTx): void {
  switch (o.type) {
    case "SessionIdle": {
      const s = ctx.sessions.get(o.sessionId);
      if (s) pause(ctx, s, `idle: ${Math.round(o.idleMs / 1000)}s without a turn`);
      break;
    }
    case "TurnStarted":
      if (o.sessionId) {
        const s = ctx.sessions.get(o.sessionId);
        if (s) renew(ctx, s);
      }
      break;
    case "TurnFinished":
      if (o.sessionId && o.status === 200) {
        const s = ctx.sessions.get(o.sessionId);
        if (s?.lease && s.prevChain.length && s.chain[0] !== s.prevChain[0])
          revoke(ctx, s, "rewrite kept nothing of the leased blocks");
      }
      break;
    case "SessionHint": {
      const s = ctx.sessions.get(o.sessionId);
      if (!s) break;
      if (o.event === "close") revoke(ctx, s, "session closed");
      else if (o.event === "idle") pause(ctx, s, "idle hint");
      else if (o.event === "rewrite" && o.keepTokens === 0)
        revoke(ctx, s, "rewrite kept nothing of the leased blocks");
      break;
    }
    default:
      break;
  }
}
