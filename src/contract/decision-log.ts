// The --json-log decision line, written by the gateway (routing, commands) and by the policies
// (their decisions) into one stream: `{"ts": ISO time, "event": kind, ...fields}`, bigints as
// decimal strings, fields left undefined left out.
export function decisionLine(at: number, event: string, fields: Record<string, unknown>): string {
  return JSON.stringify({ ts: new Date(at).toISOString(), event, ...fields }, (_k, v) =>
    typeof v === "bigint" ? v.toString() : v,
  );
}
