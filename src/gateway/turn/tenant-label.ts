// The tenant a request is counted under. Requests carry no tenant until client keys map them to
// one; until then (and for a request without one) every count goes under "default".
export const DEFAULT_TENANT = "default";

export function tenantLabel(turn: object): string {
  const t = (turn as { tenant?: unknown }).tenant;
  return typeof t === "string" && t.length > 0 ? t : DEFAULT_TENANT;
}
