// Workers kept between bench:agent configurations whose servers are alike: the same flags, no
// kvctl subscriber, no L3. Instead of a restart (a minute or more here), the next configuration
// gets them emptied by SGLang's own /flush_cache, which resets the radix tree and frees the
// device and the host pool alike (an L3 directory would survive it, hence no sharing with one).
import type { RealServer } from "../../src/demo/real-server.js";

/** SGLang refuses a flush while a request runs or waits: asked again until this deadline. */
const FLUSH_DEADLINE_MS = 30_000;

async function flush(w: RealServer): Promise<void> {
  const deadline = Date.now() + FLUSH_DEADLINE_MS;
  for (;;) {
    const r = await fetch(`${w.baseUrl}/flush_cache`, { method: "POST" });
    const body = await r.text();
    if (r.status === 200) return;
    if (Date.now() > deadline)
      throw new Error(
        `worker ${w.info.worker_id}: /flush_cache answered ${r.status} for ${FLUSH_DEADLINE_MS / 1000} s: ${body.slice(0, 200)}`,
      );
    await new Promise((res) => setTimeout(res, 250));
  }
}

export class WorkerPool {
  private held: { key: string; workers: RealServer[] } | null = null;

  constructor(private readonly log: (s: string) => void) {}

  /** Workers for one configuration: the kept ones, flushed, when `key` matches theirs (null:
   * never shared); fresh ones from `start` otherwise (the kept ones are stopped first). */
  async take(
    key: string | null,
    start: () => Promise<RealServer[]>,
  ): Promise<{ workers: RealServer[]; reused: boolean }> {
    const held = this.held;
    this.held = null;
    if (held && key !== null && held.key === key) {
      try {
        await Promise.all(held.workers.map(flush));
        return { workers: held.workers, reused: true };
      } catch (e) {
        this.log(`   kept workers not reused: ${(e as Error).message}`);
      }
    }
    if (held) await stopAll(held.workers);
    return { workers: await start(), reused: false };
  }

  /** After a configuration: its workers are kept for the next one when it ran to its end and
   * `key` is shareable, stopped otherwise. */
  async give(key: string | null, workers: RealServer[], ranToEnd: boolean): Promise<void> {
    if (key !== null && ranToEnd) this.held = { key, workers };
    else await stopAll(workers);
  }

  /** Stops the kept workers (end of a regime). */
  async drop(): Promise<void> {
    const held = this.held;
    this.held = null;
    if (held) await stopAll(held.workers);
  }
}

async function stopAll(workers: RealServer[]): Promise<void> {
  await Promise.all(workers.map((w) => w.stop()));
}
