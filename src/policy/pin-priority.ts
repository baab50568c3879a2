// Pins that cannot starve each other: one order over every hold of a worker's pin budget, and
// preemption of lower holds instead of refusing a higher one. The order: an admitted program's
// working set (a routed request's prefix, a tool call's keep) first, then parked programs (leases)
// by expected return (the sooner back, the higher), then prompt-cache markers. Caps come before
// the budget: a session or tenant over its cap is refused whatever could be preempted, so what a
// client asks (hints, markers) can never take more than its caps. Pure: the caller releases the
// holds it is told to preempt through their own release (their commands, acked as any other), and
// a plan that cannot make room preempts nothing.
import type { PinHold } from "./pin-budget.js";

/** Lower is kept longer. */
export function rankOf(kind: PinHold["kind"]): number {
  return kind === "inflight" || kind === "tool" ? 0 : kind === "lease" ? 1 : 2;
}

/** One session's holds of one kind on a worker, and the blocks only they hold (what releasing them frees). */
export interface HoldGroup {
  session: string;
  tenant: string | null;
  kind: PinHold["kind"];
  freed: number;
  /** When the session is expected back (ms; null: not known, taken as last). */
  expectedReturnAt: number | null;
}

export interface PinWant {
  session: string;
  tenant: string | null;
  kind: PinHold["kind"];
  blocks: number;
  expectedReturnAt: number | null;
}

export interface PinCaps {
  perSession: number | null;
  perTenant: number | null;
}

export type PinPlan =
  | { grant: true; preempt: HoldGroup[] }
  | { grant: false; refused: "session_cap" | "tenant_cap" | "budget"; preempt: [] };

/** The cap `want` would go over with `usage` already held, or null. */
export function overCap(
  caps: PinCaps,
  want: Pick<PinWant, "tenant" | "blocks">,
  usage: { session: number; tenant: number },
): "session_cap" | "tenant_cap" | null {
  if (caps.perSession !== null && usage.session + want.blocks > caps.perSession)
    return "session_cap";
  if (
    caps.perTenant !== null &&
    want.tenant !== null &&
    usage.tenant + want.blocks > caps.perTenant
  )
    return "tenant_cap";
  return null;
}

const later = (a: number | null, b: number | null): boolean =>
  (a ?? Number.POSITIVE_INFINITY) > (b ?? Number.POSITIVE_INFINITY);

/** Whether `g` yields to `w`: a lower rank, or a lease expected back later than the wanted one. */
function yields(g: HoldGroup, w: PinWant): boolean {
  if (g.session === w.session) return false;
  const rg = rankOf(g.kind);
  const rw = rankOf(w.kind);
  return rg > rw || (rg === 1 && rw === 1 && later(g.expectedReturnAt, w.expectedReturnAt));
}

/**
 * What `want` may have with `room` blocks free: granted as is, granted once `preempt` is released,
 * or refused (its session or tenant over its cap with `usage` already held, or not enough below it).
 */
export function planPin(
  groups: readonly HoldGroup[],
  want: PinWant,
  room: number,
  caps: PinCaps,
  usage: { session: number; tenant: number },
): PinPlan {
  const capped = overCap(caps, want, usage);
  if (capped) return { grant: false, refused: capped, preempt: [] };
  let need = want.blocks - room;
  if (need <= 0) return { grant: true, preempt: [] };
  // Markers before leases; among leases the one expected back last first; then the larger first.
  const victims = groups
    .filter((g) => g.freed > 0 && yields(g, want))
    .sort(
      (a, b) =>
        rankOf(b.kind) - rankOf(a.kind) ||
        (later(a.expectedReturnAt, b.expectedReturnAt)
          ? -1
          : later(b.expectedReturnAt, a.expectedReturnAt)
            ? 1
            : 0) ||
        b.freed - a.freed,
    );
  const preempt: HoldGroup[] = [];
  for (const g of victims) {
    if (need <= 0) break;
    preempt.push(g);
    need -= g.freed;
  }
  return need <= 0 ? { grant: true, preempt } : { grant: false, refused: "budget", preempt: [] };
}
