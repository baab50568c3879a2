// Sessions belong to the tenant that opened them. A request may use (turns, hints, markers) a
// session that is its tenant's, or any with the admin key (or with auth off). The refusal says the
// same for another tenant's session and for one that does not exist, so an answer never tells a
// tenant which ids exist.
export interface Caller {
  tenant: string | null;
  admin: boolean;
}

export const SESSION_REFUSED = "no such session for this key";

export function mayUse(who: Caller, rec: { tenant?: string | null }): boolean {
  return who.admin || (rec.tenant ?? null) === who.tenant;
}

/** A turn on a session of another tenant: answered 403, counted, nothing observed or recorded. */
export class SessionRefusedError extends Error {
  override name = "SessionRefusedError";
  constructor() {
    super(SESSION_REFUSED);
  }
}
