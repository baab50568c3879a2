// Sessions belong to the tenant that opened them, by name: a tenant key's session ids live in its
// tenant's namespace (stored as "<tenant>/<id>"), so the same id named by another tenant is simply
// a different session. A request can then neither reach nor probe another tenant's session: the
// answer for another tenant's id is, by construction, the answer for an id nobody used (same
// status, body and code path). The admin key (and callers with no tenant: auth off, or only an
// admin key configured) name stored ids as they are, "<tenant>/<id>" included.
export interface Caller {
  tenant: string | null;
  admin: boolean;
}

/** The id the caller's session `id` is stored under. */
export function scopedSessionId(who: Caller, id: string): string {
  return who.tenant === null ? id : `${who.tenant}/${id}`;
}

export const SESSION_REFUSED = "no such session for this key";

/**
 * Whether the caller may use a stored session: its own tenant's, or any with the admin key. Under
 * scoped ids a tenant key reaches only its own namespace; this refuses what is in it but was not
 * opened by that tenant (a record another gateway version or the admin key wrote there).
 */
export function mayUse(who: Caller, rec: { tenant?: string | null }): boolean {
  return who.admin || (rec.tenant ?? null) === who.tenant;
}

/** A turn on a session the caller may not use: answered 403, counted, nothing observed or recorded. */
export class SessionRefusedError extends Error {
  override name = "SessionRefusedError";
  constructor() {
    super(SESSION_REFUSED);
  }
}
