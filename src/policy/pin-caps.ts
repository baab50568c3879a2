// A session's pin caps as the policy applies them before it pins, counted in distinct blocks of
// its own budget view: the config's per-session cap and the session's tenant's caps (per session,
// and all the tenant's sessions together). A rule asks before it takes a hold, so the view never
// names a pin the gateway's own check (its backstop, for holds other replicas took) would cut.
import type { PolicyContext, SessionView } from "./context.js";
import type { PinCaps } from "./pin-priority.js";

const lower = (a: number | null, b: number | null | undefined): number | null => (b === null || b === undefined ? a : a === null ? b : Math.min(a, b));

export function capsOf(ctx: PolicyContext, s: Pick<SessionView, "tenant">): PinCaps {
  const t = s.tenant === null ? null : ctx.tenantCaps(s.tenant);
  return { perSession: lower(ctx.cfg.pins.sessionCapBlocks ?? null, t?.perSession), perTenant: t?.perTenant ?? null };
}

/** Distinct blocks a session holds pinned, over every worker. */
function pinnedBy(ctx: PolicyContext, session: string): number {
  let n = 0;
  for (const w of ctx.budget.workersOf(session)) n += ctx.budget.holdsOf(w, session).size;
  return n;
}

/** What the session, and its tenant's sessions together, hold pinned now. */
export function capUsage(ctx: PolicyContext, s: Pick<SessionView, "id" | "tenant">, caps: PinCaps): { session: number; tenant: number } {
  let tenant = 0;
  if (caps.perTenant !== null && s.tenant !== null) for (const o of ctx.sessions.values()) if (o.tenant === s.tenant) tenant += pinnedBy(ctx, o.id);
  return { session: caps.perSession === null ? 0 : pinnedBy(ctx, s.id), tenant };
}

/** Blocks the session may still add under its caps (Infinity: none apply), and the cap that binds. */
export function capRoom(ctx: PolicyContext, s: Pick<SessionView, "id" | "tenant">): { left: number; cap: "session_cap" | "tenant_cap" | null } {
  const caps = capsOf(ctx, s);
  if (caps.perSession === null && caps.perTenant === null) return { left: Number.POSITIVE_INFINITY, cap: null };
  const used = capUsage(ctx, s, caps);
  const bySession = caps.perSession === null ? Number.POSITIVE_INFINITY : caps.perSession - used.session;
  const byTenant = caps.perTenant === null || s.tenant === null ? Number.POSITIVE_INFINITY : caps.perTenant - used.tenant;
  return { left: Math.max(0, Math.min(bySession, byTenant)), cap: bySession <= byTenant ? "session_cap" : "tenant_cap" };
}
