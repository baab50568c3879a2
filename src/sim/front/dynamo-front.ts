// NVIDIA Dynamo's KV router as the `dynamo_kv` peer: its cost function (src/index/scoring.ts,
// Dynamo's DefaultWorkerScorer with its defaults) over the same index the workers' events feed, its
// load terms kept as its ActiveSequences keeps them (a request adds the prompt tokens its worker
// does not hold, its effective prefill, until its first token; and its prompt's blocks, each block
// counted once however many requests in flight share it, plus its output's blocks once it decodes;
// a candidate's decode cost is its potential decode blocks: those plus the request's own new ones),
// and its router queue as the admission budget: a request waits while every worker's active
// prefill tokens exceed the queue threshold times its batch budget (`--router-queue-threshold`, set
// as bench:agent sets it: the budget's requests of the workload's median prompt). No session
// affinity, no commands. Simplification: Dynamo adds an output block each time decoding fills
// one; here a request's output blocks are added together at its first token.
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
  /** Active prompt blocks: each distinct block and how many requests in flight hold it. */
  promptBlocks: Map<bigint, number>;
  outputBlocks: number;
  requests: number;
}

/** What a request in flight added to its worker's load, to take back. */
interface Added {
  prefillTokens: number;
  outputBlocks: number;
  decoding: boolean;
}

/** Dynamo's potential decode blocks: the worker's active blocks and the request's prompt blocks
 * it does not hold active yet. */
function potentialDecodeBlocks(l: Load, hashes: BigInt64Array): number {
  let fresh = 0;
  for (const h of hashes) if (!l.promptBlocks.has(h)) fresh++;
  return l.promptBlocks.size + l.outputBlocks + fresh;
}

export class DynamoFront implements SimFront {
  readonly index = new InMemoryKvIndex();
  private readonly loads = new Map<string, Load>();
  private readonly queue: Turn[] = [];
  private readonly added = new Map<string, Added>();
  private readonly rand: () => number;

  constructor(private readonly o: DynamoFrontOptions) {
    this.rand = seededRandom(o.seed);
    for (const id of o.host.workers)
      this.loads.set(id, {
        prefillTokens: 0,
        promptBlocks: new Map(),
        outputBlocks: 0,
        requests: 0,
      });
  }

  applyFrame(worker: string, payload: Uint8Array): void {
    this.index.applyFrame(worker, payload);
  }

  private allBusy(): boolean {
    for (const l of this.loads.values())
      if (l.prefillTokens <= this.o.busyPrefillTokens) return false;
    return true;
  }

  private route(turn: Turn): { worker: string; cachedBlocks: number } {
    const ids = this.o.host.workers;
    const hashes = turn.prepared.promptHashes;
    const overlap: OverlapResult =
      hashes.length && this.index.blocks() > 0
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
        decodeBlocks: potentialDecodeBlocks(l, hashes),
        activeRequests: l.requests,
      };
    const pick = selectWorker(
      scoreWorkers(overlap, ids, this.o.host.pageSize, loads),
      {},
      this.rand,
    );
    const worker = pick ? pick.worker : ids[0];
    return { worker, cachedBlocks: overlap.workers.get(worker)?.tiered.GPU ?? 0 };
  }

  private send(turn: Turn): void {
    const { worker, cachedBlocks } = this.route(turn);
    const l = this.loads.get(worker) as Load;
    const prompt = turn.prepared.promptLen;
    const effective = Math.max(0, prompt - cachedBlocks * this.o.host.pageSize);
    l.prefillTokens += effective;
    for (const h of turn.prepared.promptHashes)
      l.promptBlocks.set(h, (l.promptBlocks.get(h) ?? 0) + 1);
    l.requests++;
    const output = Math.ceil(turn.prepared.output.length / this.o.host.pageSize);
    this.added.set(turn.rid, { prefillTokens: effective, outputBlocks: output, decoding: false });
    turn.worker = worker;
    this.o.host.dispatch(turn, worker);
  }

  private pump(): void {
    while (this.queue.length && !this.allBusy()) this.send(this.queue.shift() as Turn);
  }

  arrive(turn: Turn): void {
    if (this.queue.length || this.allBusy()) this.queue.push(turn);
    else this.send(turn);
  }

  /** Prefill done: its effective prefill leaves the worker's load, its output blocks join it. */
  private decoding(l: Load, a: Added): void {
    if (a.decoding) return;
    a.decoding = true;
    l.prefillTokens -= a.prefillTokens;
    l.outputBlocks += a.outputBlocks;
  }

  firstToken(turn: Turn): void {
    const a = this.added.get(turn.rid);
    if (!a || a.decoding) return;
    this.decoding(this.loads.get(turn.worker as string) as Load, a);
    this.pump();
  }

  finished(turn: Turn): void {
    const a = this.added.get(turn.rid);
    if (!a) return;
    this.added.delete(turn.rid);
    const l = this.loads.get(turn.worker as string) as Load;
    this.decoding(l, a);
    l.outputBlocks -= a.outputBlocks;
    for (const h of turn.prepared.promptHashes) {
      const n = (l.promptBlocks.get(h) as number) - 1;
      if (n === 0) l.promptBlocks.delete(h);
      else l.promptBlocks.set(h, n);
    }
    l.requests--;
    this.pump();
  }

  programEnded(): void {}

  commands(): Record<string, CommandCounts> {
    return {};
  }
}
