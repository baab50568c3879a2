// The warm scenario's worker restart: the trace's first wave of sessions runs, then one worker is
// stopped and started again where it listened (same HTTP and KV-event ports, same worker id, the
// same shared `file` L3 directory), so its cache is empty while the storage holds what both workers
// backed up; once the gateway has seen it leave and come back (its health gauge), the second wave
// runs. What the restarted worker's second-wave requests got from cache is the warm rule's effect.
import type { RealServer } from "../../src/demo/real-server.js";
import type { RequestRecord } from "./driver.js";
import { placeOf, type WorkerPlace } from "./stack.js";

export interface RestartReport {
  worker: string;
  /** How long it was out of the gateway's rotation (s). */
  out_s: number;
  /** Second-wave requests it served, their prompt, recomputed and L3-served tokens. */
  after: {
    requests: number;
    prompt_tokens: number;
    recomputed_tokens: number;
    storage_hit_tokens: number;
    host_hit_tokens: number;
  };
}

const HEALTH_WAIT_MS = 600_000;

/** Waits until the gateway's kvctl_gateway_worker_healthy gauge for `worker` reads `value`. */
async function healthIs(gatewayUrl: string, worker: string, value: 0 | 1): Promise<void> {
  const line = `kvctl_gateway_worker_healthy{worker="${worker}"} ${value}`;
  const deadline = Date.now() + HEALTH_WAIT_MS;
  for (;;) {
    const text = await (await fetch(`${gatewayUrl}/metrics`)).text();
    if (text.split("\n").includes(line)) return;
    if (Date.now() > deadline) throw new Error(`the gateway never reported ${line}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Stops workers[i], waits for the gateway to drain it, starts it again in place and waits for the gateway to take it back. */
export async function restartWorker(
  workers: RealServer[],
  i: number,
  gatewayUrl: string,
  start: (place: WorkerPlace) => Promise<RealServer>,
): Promise<{ worker: string; outS: number }> {
  const old = workers[i];
  const id = old.info.worker_id;
  const place = placeOf(old);
  const t0 = performance.now();
  await old.stop();
  await healthIs(gatewayUrl, id, 0);
  workers[i] = await start(place);
  await healthIs(gatewayUrl, id, 1);
  return { worker: id, outS: +((performance.now() - t0) / 1000).toFixed(1) };
}

/** What the restarted worker's second-wave requests got from cache. */
export function afterRestart(
  wave2: readonly RequestRecord[],
  r: { worker: string; outS: number },
): RestartReport {
  const after = wave2.filter((x) => x.ok && x.worker === r.worker);
  const sum = (f: (x: RequestRecord) => number) => after.reduce((n, x) => n + f(x), 0);
  return {
    worker: r.worker,
    out_s: r.outS,
    after: {
      requests: after.length,
      prompt_tokens: sum((x) => x.promptTokens),
      recomputed_tokens: sum((x) => x.promptTokens - x.cachedTokens),
      storage_hit_tokens: sum((x) => x.storageTokens),
      host_hit_tokens: sum((x) => x.hostTokens),
    },
  };
}
