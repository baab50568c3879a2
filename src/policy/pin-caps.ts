// A session's pin caps as the policy applies them before it pins, counted in distinct blocks of
// its own budget view: the config's per-session cap and the session's tenant's caps (per session,
// and all the tenant's sessions together). A rule asks before it takes a hold, so the view never
// names a pin the gateway's own check (its backstop, for holds other replicas took) would cut.
import type { SessionView } from "./session-view.js";
import type { PolicyView } from "./tx.js";
import type { PinCaps } from "./pin-priority.js";

const lower = (a: number | null, b: number | null | undefined): number | null =>
  b === null || b === undefined ? a : a === null ? b : Math.min(a, b);

export function capsOf(ctx: PolicyView, s: Pick<SessionView, "tenant">): PinCaps {
  const t = s.tenant === null ? null : ctx.tenantCaps(s.tenant);
  return {
    perSession: lower(ctx.cfg.pins.sessionCapBlocks ?? null, t?.perSession),
    perTenant: t?.perTenant ?? null,
  };
}

/** Who a cap is counted for: a session, or a request's own hold (`session`: the session it belongs to). */
export interface CapHolder {
  id: string;
  session?: string | null;
  tenant: string | null;
}

/** The session whose caps apply: a request's hold counts toward its session's. */
export const capKey = (s: CapHolder): string => s.session ?? s.id;

/** What the session (its requests' holds included), and its tenant's sessions together, hold pinned now. */
export function capUsage(
  ctx: PolicyView,
  s: CapHolder,
  caps: PinCaps,
): { session: number; tenant: number } {
  let tenant = 0;
  if (caps.perTenant !== null && s.tenant !== null)
    for (const o of ctx.sessions.values())
      if (o.tenant === s.tenant) tenant += ctx.budget.heldFor(o.id);
  return { session: caps.perSession === null ? 0 : ctx.budget.heldFor(capKey(s)), tenant };
}

/** Blocks the session may still add under its caps (Infinity: none apply), and the cap that binds. */
export function capRoom(
  ctx: PolicyView,
  s: CapHolder,
): { left: number; cap: "session_cap" | "tenant_cap" | null } {
  const caps = capsOf(ctx, s);
  if (caps.perSession === null && caps.perTenant === null)
    return { left: Number.POSITIVE_INFINITY, cap: null };
  const used = capUsage(ctx, s, caps);
  const bySession =
    caps.perSession === null ? Number.POSITIVE_INFINITY : caps.perSession - used.session;
  const byTenant =
    caps.perTenant === null || s.tenant === null
      ? Number.POSITIVE_INFINITY
      : caps.perTenant - used.tenant;
  return {
    left: Math.max(0, Math.min(bySession, byTenant)),
    cap: bySession <= byTenant ? "session_cap" : "tenant_cap",
  };
}

/** How many of `hashes` (in order) the caps leave the holder on `worker`, and the cap that binds:
 * blocks it (or its session, or one of its session's requests) holds already are free. */
export function capPrefix(
  ctx: PolicyView,
  s: CapHolder,
  worker: string,
  hashes: readonly bigint[],
): { fit: number; cap: "session_cap" | "tenant_cap" | null } {
  const room = capRoom(ctx, s);
  if (room.left === Number.POSITIVE_INFINITY) return { fit: hashes.length, cap: null };
  const key = capKey(s);
  let left = room.left;
  for (let i = 0; i < hashes.length; i++) {
    if (ctx.budget.holdsAt(worker, hashes[i]).some((p) => p.session === key || p.of === key))
      continue;
    if (left <= 0) return { fit: i, cap: room.cap };
    left--;
  }
  return { fit: hashes.length, cap: room.cap };
}
