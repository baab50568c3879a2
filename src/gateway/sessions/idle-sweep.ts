// Sessions idle past sessions.idleAfterSeconds are reported to the policy once per quiet spell
// (SessionIdle); another replica may have served a later turn, so the bucket has the last word.
import type { Observation } from "../../contract/observations.js";
import type { SessionStore } from "./session-store.js";

export function idleSweeper(
  sessions: SessionStore,
  now: () => number,
  idleAfterSeconds: number,
  observe: (o: Observation) => void,
): () => Promise<void> {
  const notified = new Map<string, number>();
  const idleMs = idleAfterSeconds * 1000;
  return async () => {
    const t = now();
    for (const local of [...sessions.localRecords()]) {
      if (t - local.lastActivityMs < idleMs) continue;
      if (notified.get(local.id) === local.lastActivityMs) continue;
      const rec = (await sessions.get(local.id)) ?? local;
      if (t - rec.lastActivityMs < idleMs) continue;
      if (notified.get(rec.id) === rec.lastActivityMs) continue;
      notified.set(rec.id, rec.lastActivityMs);
      observe({
        type: "SessionIdle",
        at: t,
        sessionId: rec.id,
        worker: rec.worker,
        idleMs: t - rec.lastActivityMs,
        chain: rec.chain.map((h) => BigInt(h)),
      });
    }
  };
}
