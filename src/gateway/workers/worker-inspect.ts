// Each worker's own account, read with Inspect: periodically (and at start) the gateway asks every
// worker for the pin counts of the blocks its session records name there, and for the process it
// runs. A new process means the worker restarted (whatever the event stream showed): its blocks
// leave the index, the event sequence starts over, and the policy forgets what it held there (and
// re-issues what sessions still need). A restart the event stream shows first (its sequence starts
// over) is handled the same way there, and the worker's Inspect is asked at once. The pin counts go to the policy, which repairs its budget
// view where the worker holds fewer pins than it thinks.
import type { ControlPublisher } from "../../control/publisher.js";
import type { KvIndex } from "../../index/index.js";
import type { HoldMetrics } from "../sessions/holds/metrics.js";
import type { Observation } from "../../contract/observations.js";
import type { GatewayWorker } from "./worker.js";
import { Periodic } from "../core/periodic.js";
import type { GatewayLog } from "../core/logger.js";

/** Most block hashes one Inspect asks about (the ack must stay within a NATS message). */
const MAX_INSPECT_BLOCKS = 4096;
const INSPECT_TIMEOUT_MS = 15_000;

export interface WorkerInspectorOptions {
  workers: () => readonly GatewayWorker[];
  publisher: () => ControlPublisher | null;
  index: KvIndex;
  observe: (o: Observation) => void;
  /** The gateway's clock (ms). */
  now: () => number;
  log: GatewayLog;
  metrics: HoldMetrics;
  intervalMs: number;
  /** Pins per block the records this replica touched name on a worker (what its counts are read for). */
  namedPins: (worker: string) => Map<bigint, number>;
}

export class WorkerInspector {
  private readonly incarnations = new Map<string, string>();
  private readonly silent = new Set<string>();
  /** Workers whose restart the event stream showed, until their Inspect names the new process. */
  private readonly fromEvents = new Set<string>();
  private readonly logged = new Set<string>();

  private readonly rounds: Periodic;

  constructor(private readonly o: WorkerInspectorOptions) {
    this.rounds = new Periodic(
      async () => {
        await Promise.all(this.o.workers().map((w) => this.inspect(w)));
      },
      o.intervalMs,
      (e) => this.o.log.warn(`gateway: worker Inspect: ${e.message}`),
    );
  }

  /** The process the worker ran at its last Inspect (null before the first, or when it does not say). */
  incarnation(worker: string): string | null {
    return this.incarnations.get(worker) ?? null;
  }

  start(): void {
    this.rounds.start();
  }

  stop(): Promise<void> {
    return this.rounds.stop();
  }

  /** One round over every worker (a round still running is joined, not doubled). */
  inspectAll(): Promise<void> {
    return this.rounds.run();
  }

  private async inspect(w: GatewayWorker): Promise<void> {
    const pub = this.o.publisher();
    if (!pub) return;
    const named = this.o.namedPins(w.id);
    const blocks = [...named.keys()].slice(0, MAX_INSPECT_BLOCKS);
    let detail: { incarnation?: unknown; blocks?: unknown } | null;
    try {
      // One try, with room to answer: a resend would be answered as a duplicate, without the report.
      const ack = await pub.send(
        w.id,
        { type: "Inspect", block_hashes: blocks },
        { retries: 0, timeoutMs: INSPECT_TIMEOUT_MS },
      );
      if (ack.status !== "applied") return;
      detail = (ack as { detail?: typeof detail }).detail ?? null;
    } catch {
      return; // a worker that does not answer is the health check's business
    }
    const inc = typeof detail?.incarnation === "string" ? detail.incarnation : null;
    if (inc === null && !this.silent.has(w.id)) {
      this.silent.add(w.id);
      this.o.log.warn(
        `gateway: worker ${w.id}: Inspect names no process incarnation (an older worker); its restarts are seen from its event stream only`,
      );
    }
    const prev = this.incarnations.get(w.id);
    if (inc !== null) this.incarnations.set(w.id, inc);
    // A restart the event stream showed first is handled already: this only learns the new process.
    const seen = inc !== null && prev !== inc && this.fromEvents.delete(w.id);
    if (prev !== undefined && inc !== null && prev !== inc && !seen) this.restarted(w, prev, inc);
    if (seen) this.o.log.info(`gateway: worker ${w.id}: its new process is ${inc} (was ${prev})`);
    const pins = new Map<bigint, number>(blocks.map((h) => [h, 0]));
    for (const b of Array.isArray(detail?.blocks) ? detail.blocks : []) {
      const x = b as { block_hash?: unknown; pin_count?: unknown };
      if (
        (typeof x.block_hash === "number" || typeof x.block_hash === "bigint") &&
        typeof x.pin_count === "number"
      )
        pins.set(BigInt(x.block_hash), x.pin_count);
    }
    this.diverged(w.id, named, pins);
    this.o.observe({ type: "WorkerPins", at: this.o.now(), worker: w.id, pins });
  }

  /** Blocks where the worker holds fewer pins than the records name: counted, logged once a worker. */
  private diverged(worker: string, named: Map<bigint, number>, pins: Map<bigint, number>): void {
    let n = 0;
    for (const [h, c] of pins) if (c < (named.get(h) ?? 0)) n++;
    if (!n) return;
    this.o.metrics.divergences.inc({ worker, kind: "fewer_pins" }, n);
    if (this.logged.has(worker)) return;
    this.logged.add(worker);
    this.o.log.warn(
      `gateway: worker ${worker} holds fewer pins than the session records name on ${n} block(s) (expired, or lost with a restart); the budget view follows the worker, the records drop them on release or expiry`,
    );
  }

  /**
   * The worker's event stream started over (the consumer cleared its blocks and told the policy):
   * counted and logged as a restart, and its Inspect asked now, so holds taken on the old process
   * are told apart from new ones without waiting for the next round.
   */
  restartedFromEvents(worker: string): void {
    const w = this.o.workers().find((x) => x.id === worker);
    if (!w) return;
    this.o.metrics.workerRestarts.inc({ worker });
    this.o.log.warn(
      `gateway: worker ${worker} runs a new process (its KV-event sequence started over): its pins, leases and blocks are forgotten`,
    );
    w.newProcess();
    if (this.incarnations.has(worker)) this.fromEvents.add(worker);
    void this.learn(w, this.incarnations.get(worker));
  }

  /** Asks the worker's Inspect until it names a process other than `before` (a fresh one may not answer yet). */
  private async learn(w: GatewayWorker, before: string | undefined): Promise<void> {
    for (let attempt = 1; attempt <= 10; attempt++) {
      await this.inspect(w);
      const now = this.incarnations.get(w.id);
      if (now !== undefined && now !== before) return;
      await new Promise((r) => setTimeout(r, Math.min(5000, 500 * attempt)).unref());
    }
  }

  private restarted(w: GatewayWorker, prev: string, now: string): void {
    this.o.metrics.workerRestarts.inc({ worker: w.id });
    this.o.log.warn(
      `gateway: worker ${w.id} runs a new process (${prev} -> ${now}): its pins, leases and blocks are forgotten`,
    );
    this.o.index.clearWorker(w.id);
    w.newProcess();
    // The new process numbers its event batches from 0 again: the next one starts a fresh sequence.
    w.consumer?.seq.reset();
    this.o.observe({
      type: "WorkerCleared",
      at: this.o.now(),
      worker: w.id,
      reason: "restart",
    });
  }
}
