// Sessions idle past sessions.idleAfterSeconds are reported to the policy once per quiet spell
// (SessionIdle); another replica may have served a later turn, so the bucket has the last word.
import type { Observation } from "../../contract/observations.js";
import type { Clock } from "../core/clock.js";
import type { SessionStore } from "./session-store.js";

export function idleSweeper(
  sessions: SessionStore,
  clock: Clock,
  idleAfterSeconds: number,
  observe: (o: Observation) => void,
): () => Promise<void> {
  const notified = new Map<string, number>();
  const idleMs = idleAfterSeconds * 1000;
  return async () => {
    const now = clock.now();
    for (const local of [...sessions.localRecords()]) {
      if (now - local.lastActivityMs < idleMs) continue;
      if (notified.get(local.id) === local.lastActivityMs) continue;
      const rec = (await sessions.get(local.id)) ?? local;
      if (now - rec.lastActivityMs < idleMs) continue;
      if (notified.get(rec.id) === rec.lastActivityMs) continue;
      notified.set(rec.id, rec.lastActivityMs);
      observe({
        type: "SessionIdle",
        at: now,
        sessionId: rec.id,
        worker: rec.worker,
        idleMs: now - rec.lastActivityMs,
        chain: rec.chain.map((h) => BigInt(h)),
      });
    }
  };
}
