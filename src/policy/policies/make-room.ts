// Room in a worker's pin budget for one session's hold, preempting lower holds (pin-priority.ts)
// instead of refusing a higher one: each preempted hold goes through its own release (a lease its
// RevokeLease without the purge, markers their unpin), so the hold records stay true; the blocks
// stay to the worker's own eviction. The paused sessions' share, when
// the hold is a lease, is freed only by other leases: markers are preempted for a lease only when
// the budget, not the share, binds.
import type { PinHold } from "../pin-budget.js";
import { overCap, planPin } from "../pin-priority.js";
import type { SessionView } from "../session-view.js";
import type { PolicyTx, PolicyView } from "../tx.js";
import { capKey, capsOf, capUsage } from "../pin-caps.js";

/** When a session is expected back: after as long again as it has been idle. */
const expectedReturn = (
  ctx: PolicyView,
  s: Pick<SessionView, "lastActivity"> | undefined,
): number | null => (s ? 2 * ctx.now - s.lastActivity : null);

/** Who asks for the room: a session, or a request's own hold (`session`: the session it belongs to, whose holds it never preempts). */
export interface RoomHolder {
  id: string;
  lastActivity: number;
  session?: string | null;
  /** Whose caps apply (null: the config's per-session cap only). */
  tenant: string | null;
}

export interface RoomWant {
  /** The rule asking (its decisions are counted under it). */
  policy: string;
  kind: PinHold["kind"];
  /** The share of the per-worker budget this kind may hold, or null (all of it). */
  share: number | null;
  /** Note a refusal as the rule's skip (false: the caller goes on with what fits and says so itself). */
  noteRefusal?: boolean;
}

/** Whether `blocks` fit for `s` now, or once lower holds were preempted; false releases nothing.
 * The session's caps come first: over them nothing is preempted. */
export function makeRoom(
  ctx: PolicyTx,
  s: RoomHolder,
  worker: string,
  blocks: readonly bigint[],
  want: RoomWant,
  releaseLease: (ctx: PolicyTx, s: SessionView, why: string) => void,
): boolean {
  if (overCaps(ctx, s, worker, blocks, want)) return false;
  const limit = want.share === null ? undefined : { kind: want.kind, share: want.share };
  const fit = ctx.budget.admit(worker, blocks, limit);
  if (fit >= blocks.length) return true;
  const plan = planPin(
    preemptible(ctx, s, worker, blocks, want),
    {
      session: s.id,
      tenant: s.tenant,
      kind: want.kind,
      blocks: blocks.length,
      expectedReturnAt: expectedReturn(ctx, s),
    },
    fit,
    { perSession: null, perTenant: null },
    { session: 0, tenant: 0 },
  );
  if (!plan.grant) {
    if (want.noteRefusal === false) return false;
    ctx.note(
      want.policy,
      "skip",
      `pin budget: no room for ${blocks.length} blocks, and no lower holds to preempt`,
      { session: s.id, worker, used: ctx.budget.used(worker) },
    );
    return false;
  }
  for (const v of plan.preempt) preempt(ctx, s, worker, v, want, releaseLease);
  return ctx.budget.admit(worker, blocks, limit) >= blocks.length;
}

/** Whether the session's caps refuse `blocks` (noted as the rule's skip unless told not to). */
function overCaps(
  ctx: PolicyTx,
  s: RoomHolder,
  worker: string,
  blocks: readonly bigint[],
  want: RoomWant,
): boolean {
  const caps = capsOf(ctx, s);
  const used = capUsage(ctx, s, caps);
  // Blocks the session (or one of its requests) holds already cost its caps nothing more.
  const key = capKey(s);
  const adds = blocks.filter(
    (h) => !ctx.budget.holdsAt(worker, h).some((p) => p.session === key || p.of === key),
  ).length;
  const capped = overCap(caps, { tenant: s.tenant, blocks: adds }, used);
  if (capped && want.noteRefusal !== false) {
    const why =
      capped === "session_cap"
        ? `session cap: ${used.session} + ${adds} blocks over ${caps.perSession}`
        : `tenant cap: ${used.tenant} + ${adds} blocks over ${caps.perTenant} for tenant ${s.tenant}`;
    ctx.note(want.policy, "skip", why, { session: s.id, worker });
  }
  return Boolean(capped);
}

/** The holds on the worker that may yield to this one: other sessions' leases there, and their
 * markers unless the kind's share (not the budget) binds. */
function preemptible(
  ctx: PolicyTx,
  s: RoomHolder,
  worker: string,
  blocks: readonly bigint[],
  want: RoomWant,
): Parameters<typeof planPin>[0] {
  const fresh = blocks.filter((h) => ctx.budget.holdsAt(worker, h).length === 0).length;
  const shareBinds =
    want.share !== null && ctx.budget.shareRoom(worker, want.kind, want.share) < fresh;
  return ctx.budget
    .groups(worker)
    .filter((g) => g.session !== s.session)
    .filter((g) =>
      g.kind === "lease"
        ? ctx.sessions.get(g.session)?.lease?.worker === worker
        : !shareBinds && g.kind === "marker",
    )
    .map((g) => ({
      ...g,
      tenant: ctx.sessions.get(g.session)?.tenant ?? null,
      expectedReturnAt: expectedReturn(ctx, ctx.sessions.get(g.session)),
    }));
}

/** One hold yields: a lease through its own release, markers through their unpin. */
function preempt(
  ctx: PolicyTx,
  s: RoomHolder,
  worker: string,
  v: ReturnType<typeof planPin>["preempt"][number],
  want: RoomWant,
  releaseLease: (ctx: PolicyTx, s: SessionView, why: string) => void,
): void {
  const why = `preempted for ${s.id}'s ${want.kind} hold: ${v.kind === "marker" ? "markers yield" : "a session expected back later yields"}`;
  if (v.kind === "lease") {
    const o = ctx.sessions.get(v.session);
    if (o) releaseLease(ctx, o, why);
  } else {
    const hashes = [...ctx.budget.holdsOf(worker, v.session, v.kind).keys()];
    ctx.release(worker, hashes, v.session, v.kind);
    ctx.emit(
      want.policy,
      {
        worker,
        sessionId: v.session,
        reason: why,
        hold: "marker",
        command: { type: "Cache", block_hashes: hashes, pin: false },
      },
      { essential: true },
    );
  }
  ctx.note(want.policy, "preempt", `${v.kind}: ${why}`, { session: v.session, worker, for: s.id });
}
