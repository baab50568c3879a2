// NVIDIA Dynamo's KV router as the `dynamo_kv` peer: its cost function (src/index/scoring.ts,
// Dynamo's DefaultWorkerScorer with its defaults) over the same index the workers' events feed, its
// load terms (prompt tokens routed and not yet prefilled, KV blocks of requests in flight), and its
// router queue as the admission budget: a request waits while every worker's active prefill tokens
// exceed the queue threshold times its batch budget (`--router-queue-threshold`, set as bench:agent
// sets it: the budget's requests of the workload's median prompt). No session affinity, no commands.
import { seededRandom } from "../random.js";
import {
  InMemoryKvIndex,
  type OverlapResult,
  scoreWorkers,
  selectWorker,
  type WorkerLoad,
} from "./parts.js";
import type { CommandCounts, FrontHost, SimFront, Turn } from "./types.js";

export interface DynamoFrontOptions {
  host: FrontHost;
  /** Prefill tokens above which a worker counts as busy (threshold x its batch budget). */
  busyPrefillTokens: number;
  seed: number;
}

interface Load {
  prefillTokens: number;
  blocks: number;
  requests: number;
}

export class DynamoFront implements SimFront {
  readonly index = new InMemoryKvIndex();
  private readonly loads = new Map<string, Load>();
  private readonly queue: Turn[] = [];
  private readonly prefilling = new Set<string>();
  private readonly rand: () => number;

  constructor(private readonly o: DynamoFrontOptions) {
    this.rand = seededRandom(o.seed);
    for (const id of o.host.workers)
      this.loads.set(id, { prefillTokens: 0, blocks: 0, requests: 0 });
  }

  applyFrame(worker: string, payload: Uint8Array): void {
    this.index.applyFrame(worker, payload);
  }

  private blocks(turn: Turn): number {
    return Math.ceil(
      (turn.prepared.promptLen + turn.prepared.output.length) / this.o.host.pageSize,
    );
  }

  private allBusy(): boolean {
    for (const l of this.loads.values())
      if (l.prefillTokens <= this.o.busyPrefillTokens) return false;
    return true;
  }

  private route(turn: Turn): string {
    const ids = this.o.host.workers;
    const hashes = turn.prepared.promptHashes;
    const overlap: OverlapResult =
      hashes.length && this.index.stats().blocks > 0
        ? this.index.overlap(hashes)
        : {
            requestBlocks: hashes.length,
            workers: new Map(),
            shared: { ranges: [], totalHits: 0 },
          };
    const loads: Record<string, WorkerLoad> = {};
    for (const [id, l] of this.loads)
      loads[id] = {
        activePrefillTokens: l.prefillTokens,
        decodeBlocks: l.blocks,
        activeRequests: l.requests,
      };
    const pick = selectWorker(
      scoreWorkers(overlap, ids, this.o.host.pageSize, loads),
      {},
      this.rand,
    );
    return pick ? pick.worker : ids[0];
  }

  private send(turn: Turn): void {
    const worker = this.route(turn);
    const l = this.loads.get(worker) as Load;
    l.prefillTokens += turn.prepared.promptLen;
    l.blocks += this.blocks(turn);
    l.requests++;
    turn.worker = worker;
    this.prefilling.add(turn.rid);
    this.o.host.dispatch(turn, worker);
  }

  private pump(): void {
    while (this.queue.length && !this.allBusy()) this.send(this.queue.shift() as Turn);
  }

  arrive(turn: Turn): void {
    if (this.queue.length || this.allBusy()) this.queue.push(turn);
    else this.send(turn);
  }

  firstToken(turn: Turn): void {
    if (!this.prefilling.delete(turn.rid)) return;
    (this.loads.get(turn.worker as string) as Load).prefillTokens -= turn.prepared.promptLen;
    this.pump();
  }

  finished(turn: Turn): void {
    const l = this.loads.get(turn.worker as string) as Load;
    if (this.prefilling.delete(turn.rid)) l.prefillTokens -= turn.prepared.promptLen;
    l.blocks -= this.blocks(turn);
    l.requests--;
    this.pump();
  }

  programEnded(): void {}

  commands(): Record<string, CommandCounts> {
    return {};
  }
}
