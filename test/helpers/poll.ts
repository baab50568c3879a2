// Waiting for a state a test can only see by asking for it (a gateway's metrics or readiness, a
// session record in the bucket, the worker's Inspect, a stand-in's counters): the condition is the
// signal, and the pause between looks only spaces them.
import type { SessionRecord } from "../../src/gateway/sessions/holds/record.js";

const bigintJson = (v: unknown) =>
  JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? String(x) : x));

/** `get`'s value once `ok` holds for it; past `ms`, throws naming `what` and the last value (with `detail`, its text). */
export async function pollFor<T>(
  what: string,
  get: () => T | Promise<T>,
  ok: (v: T) => boolean,
  opts: { ms?: number; everyMs?: number; detail?: (v: T) => string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.ms ?? 60_000);
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}: ${(opts.detail ?? bigintJson)(v)}`);
    await new Promise((r) => setTimeout(r, opts.everyMs ?? 25));
  }
}

/** Returns once `cond` holds; past `ms`, throws naming `what`. */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  ms = 60_000,
): Promise<void> {
  await pollFor(what, cond, (v) => v, { ms });
}

interface RecordSource {
  settled(): Promise<void>;
  sessions: { get(id: string): Promise<SessionRecord | null> };
}

/** The session's record once `ok` holds, each look after the gateway settled (command outcomes are written after the ack arrives). */
export async function recordWhen(
  g: RecordSource,
  id: string,
  ok: (r: SessionRecord) => boolean,
  ms = 60_000,
): Promise<SessionRecord> {
  const get = async () => {
    await g.settled();
    return g.sessions.get(id);
  };
  return (await pollFor(`session ${id}'s record to match`, get, (r) => r !== null && ok(r), {
    ms,
  })) as SessionRecord;
}
