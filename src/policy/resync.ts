// A session this replica has seen before may have changed on another replica since: its record,
// read at each turn's start, is the truth. Holds of the view the record no longer names (closed,
// revoked or reaped elsewhere) leave the view; marker pins and a lease the record names and the
// view lacks are adopted, so they are neither pinned twice nor taken for fresh when they are gone;
// but not those the worker's own counts showed gone (the worker is the truth for what it pins).
import type { StoredSessionState } from "../contract/observations.js";
import type { SessionView } from "./session-view.js";
import type { PolicyTx } from "./tx.js";
import { type PinHold, SETTLE_MS } from "./pin-budget.js";

// A hold taken less than SETTLE_MS ago may still be on its way to the worker, and to the record
// (the ledger writes it after the policy took it, and a turn's record may have been read before).

const takenAt = (p: PinHold) =>
  p.expiresAt !== null && p.ttlSeconds !== null
    ? p.expiresAt - p.ttlSeconds * 1000
    : Number.NEGATIVE_INFINITY;
const settled = (ctx: Pick<PolicyTx, "now">) => (p: PinHold) => takenAt(p) <= ctx.now - SETTLE_MS;

type StoredPin = StoredSessionState["pins"][number] & { kind?: string };

export function storedMarkers(st: StoredSessionState, now: number): StoredPin[] {
  return (st.pins as StoredPin[]).filter(
    (p) =>
      (p.kind === undefined || p.kind === "marker") &&
      (p.ttlSeconds === null || p.atMs + p.ttlSeconds * 1000 > now),
  );
}

function resyncMarkers(ctx: PolicyTx, s: SessionView, st: StoredSessionState): number {
  const named = new Map<string, Map<bigint, number>>();
  for (const p of storedMarkers(st, ctx.now)) {
    const m = named.get(p.worker) ?? new Map<bigint, number>();
    for (const h of p.blockHashes) m.set(BigInt(h), (m.get(BigInt(h)) ?? 0) + 1);
    named.set(p.worker, m);
  }
  let changed = 0;
  for (const worker of ctx.budget.workersOf(s.id)) {
    const m = named.get(worker);
    for (const [h, holds] of ctx.budget.holdsOf(worker, s.id, "marker")) {
      // The oldest go first (release takes them in order), and only settled ones can be missing.
      const extra = holds.filter(settled(ctx)).length - (m?.get(h) ?? 0);
      for (let i = 0; i < extra; i++) ctx.release(worker, [h], s.id, "marker");
      if (extra > 0) changed++;
    }
  }
  for (const worker of new Set([...named.keys(), ...ctx.budget.workersOf(s.id)]))
    ctx.keepLostOnly(worker, s.id, new Set(named.get(worker)?.keys() ?? []));
  for (const p of storedMarkers(st, ctx.now)) {
    const view = ctx.budget.holdsOf(p.worker, s.id, "marker");
    // A hold the worker was found without stays out of the view: the record is behind the worker.
    const missing = p.blockHashes
      .map((h) => BigInt(h))
      .filter((h) => !view.has(h) && !ctx.budget.wasLost(p.worker, s.id, h));
    if (!missing.length) continue;
    ctx.hold(p.worker, missing, {
      session: s.id,
      kind: "marker",
      ttlSeconds: p.ttlSeconds,
      expiresAt: p.ttlSeconds === null ? null : p.atMs + p.ttlSeconds * 1000,
    });
    changed++;
  }
  return changed;
}

/** Brings the view of a session it has seen before in line with the record read at this turn's start. */
export function resyncSession(ctx: PolicyTx, s: SessionView, st: StoredSessionState): void {
  let changed = resyncMarkers(ctx, s, st);
  const leaseSettled =
    s.lease !== null &&
    [...ctx.budget.holdsOf(s.lease.worker, s.id, "lease").values()].some((l) =>
      l.some(settled(ctx)),
    );
  if (s.lease && leaseSettled && !st.leases.some((l) => l.leaseId === s.lease?.id)) {
    ctx.release(s.lease.worker, s.lease.blocks, s.id, "lease");
    ctx.patch(s.id, { lease: null, paused: false });
    changed++;
  }
  if (changed)
    ctx.note("restore", "resync", "the view follows the session record, which names other holds", {
      session: s.id,
      changes: changed,
    });
}

/**
 * The worker's own pin counts for blocks the view holds: where it holds fewer pins than the view
 * names, the view drops the difference (soonest to expire first), so its budget matches the
 * worker's. More pins there than the view names are other replicas'. Returns the blocks repaired.
 */
export function reconcilePins(
  ctx: PolicyTx,
  worker: string,
  pins: ReadonlyMap<bigint, number>,
): number {
  let repaired = 0;
  for (const [h, n] of pins) {
    const holds = ctx.budget
      .holdsAt(worker, h)
      .filter(settled(ctx))
      .sort(
        (a, b) =>
          (a.expiresAt ?? Number.POSITIVE_INFINITY) - (b.expiresAt ?? Number.POSITIVE_INFINITY),
      );
    const extra = holds.length - n;
    if (extra <= 0) continue;
    for (const p of holds.slice(0, extra)) ctx.lose(worker, h, p.session, p.kind);
    repaired++;
  }
  if (repaired)
    ctx.note("reconcile", "repair", "the worker holds fewer pins than the budget view named", {
      worker,
      blocks: repaired,
    });
  return repaired;
}

/** Adopts what the session store holds of a session this replica sees for the first time. */
export function restoreSession(ctx: PolicyTx, s: SessionView, st: StoredSessionState): void {
  const now = ctx.now;
  const live = st.leases.filter((l) => l.ttlSeconds === null || l.atMs + l.ttlSeconds * 1000 > now);
  const l = live[live.length - 1];
  const patch: Partial<Mutable<SessionView>> = { worker: st.worker };
  if (l) {
    patch.lease = {
      id: l.leaseId,
      worker: l.worker,
      blocks: l.blockHashes.map((h) => BigInt(h)),
      restored: true,
    };
    const expiresAt = l.ttlSeconds === null ? null : l.atMs + l.ttlSeconds * 1000;
    ctx.hold(l.worker, patch.lease.blocks, {
      session: s.id,
      kind: "lease",
      ttlSeconds: l.ttlSeconds,
      expiresAt,
    });
    const seq = Number(l.leaseId.slice(l.leaseId.lastIndexOf(".") + 1));
    if (Number.isInteger(seq)) patch.leaseSeq = seq;
  }
  for (const p of storedMarkers(st, now)) {
    const expiresAt = p.ttlSeconds === null ? null : p.atMs + p.ttlSeconds * 1000;
    if (expiresAt !== null && expiresAt <= now) continue;
    const blocks = p.blockHashes
      .map((h) => BigInt(h))
      .filter((h) => !ctx.budget.wasLost(p.worker, s.id, h));
    ctx.hold(p.worker, blocks, {
      session: s.id,
      kind: "marker",
      ttlSeconds: p.ttlSeconds,
      expiresAt,
    });
  }
  if (st.tool && st.tool.epoch !== null) {
    patch.tool = {
      mode: "offload",
      worker: st.tool.worker,
      names: [],
      callIds: [],
      startedAt: st.tool.startedMs,
      predictedSeconds: 0,
      blocks: [],
      epoch: st.tool.epoch,
    };
  }
  ctx.patch(s.id, patch);
  if (l || storedMarkers(st, now).length || patch.tool)
    ctx.note("restore", "adopt", "session state from the session store", {
      session: s.id,
      leases: live.length,
      pins: st.pins.length,
      tool: patch.tool !== undefined,
    });
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
