// The warm scenario's worker restart: one worker stopped mid-trace and started again where it
// listened (same HTTP and KV-event ports, same worker id, the same shared `file` L3 directory), so
// its cache is empty but the storage holds what both workers backed up; and what the requests that
// worker served after it came back got from cache (the effect the warm rule is after).
import type { RealServer } from "../../src/demo/real-server.js";
import type { RequestRecord } from "./driver.js";
import { placeOf, type WorkerPlace } from "./stack.js";

export interface RestartReport {
  worker: string;
  /** When it was stopped and when it served again (s since the trace began). */
  stopped_s: number;
  back_s: number;
  /** Requests it served after it came back, their prompt, recomputed and L3-served tokens. */
  after: { requests: number; prompt_tokens: number; recomputed_tokens: number; storage_hit_tokens: number; host_hit_tokens: number };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Stops workers[i] `atMs` after the trace began (t0) and starts it again in place; the array
 * holds the new process afterwards (so cleanup stops it). Resolves with the times.
 */
export async function restartMidTrace(workers: RealServer[], i: number, atMs: number, t0: number, start: (place: WorkerPlace) => Promise<RealServer>): Promise<{ worker: string; stoppedMs: number; backMs: number }> {
  await sleep(Math.max(0, atMs - (performance.now() - t0)));
  const old = workers[i];
  const place = placeOf(old);
  const stoppedMs = performance.now() - t0;
  await old.stop();
  workers[i] = await start(place);
  return { worker: old.info.worker_id, stoppedMs, backMs: performance.now() - t0 };
}

/** What the restarted worker's requests sent after it was back got from cache. */
export function afterRestart(records: readonly RequestRecord[], r: { worker: string; stoppedMs: number; backMs: number }): RestartReport {
  const after = records.filter((x) => x.ok && x.worker === r.worker && x.sentMs >= r.backMs);
  const sum = (f: (x: RequestRecord) => number) => after.reduce((n, x) => n + f(x), 0);
  return {
    worker: r.worker,
    stopped_s: +(r.stoppedMs / 1000).toFixed(1),
    back_s: +(r.backMs / 1000).toFixed(1),
    after: {
      requests: after.length,
      prompt_tokens: sum((x) => x.promptTokens),
      recomputed_tokens: sum((x) => x.promptTokens - x.cachedTokens),
      storage_hit_tokens: sum((x) => x.storageTokens),
      host_hit_tokens: sum((x) => x.hostTokens),
    },
  };
}
