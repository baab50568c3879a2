// Where the policy's commands go: through the control publisher to the worker (or the broadcast
// subject), each outcome counted and handed back to be recorded in its session. While NATS is
// down, commands wait in a bounded queue; when it is full, new ones are dropped and counted.
import type { ControlPublisher } from "../../control/publisher.js";
import { type Ack, CommandValidationError, validateCommand } from "../../protocol/index.js";
import type { CommandCounts } from "../telemetry/metric-parts.js";
import type { PolicyCommand } from "../../contract/policy.js";
import type { GatewayLog } from "../core/logger.js";

/** What became of a policy command; `elapsedMs`: from its hand-over to the outcome (sent ones). */
export type CommandOutcome =
  | { state: "acked"; id: string | null; acks: Ack[]; elapsedMs?: number }
  | { state: "failed"; id: string | null; error: string; elapsedMs?: number }
  | { state: "dropped"; id: null; error: string };

export interface CommandSinkOptions {
  /** The publisher while NATS is up, else null. */
  publisher: () => ControlPublisher | null;
  maxQueued: number;
  metrics: CommandCounts;
  onOutcome: (pc: PolicyCommand, outcome: CommandOutcome) => void;
  log: GatewayLog;
}

export class CommandSink {
  private readonly queue: PolicyCommand[] = [];
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly o: CommandSinkOptions) {}

  get queued(): number {
    return this.queue.length;
  }

  /** Commands sent and not answered yet. */
  get inFlight(): number {
    return this.pending.size;
  }

  submit(pc: PolicyCommand): void {
    const { metrics } = this.o;
    try {
      validateCommand(pc.command);
    } catch (e) {
      if (!(e instanceof CommandValidationError)) throw e;
      metrics.commandsDropped.inc({ reason: "invalid" });
      this.o.log.error(
        `gateway: policy command ${pc.command?.type ?? "?"} for ${pc.worker} is invalid (${e.message}); dropped`,
      );
      this.o.onOutcome(pc, { state: "dropped", id: null, error: `invalid: ${e.message}` });
      return;
    }
    if (this.o.publisher() && this.queue.length === 0) {
      this.send(pc);
      return;
    }
    if (this.queue.length >= this.o.maxQueued) {
      metrics.commandsDropped.inc({ reason: "queue_full" });
      this.o.onOutcome(pc, {
        state: "dropped",
        id: null,
        error: `command queue full (${this.o.maxQueued}) while NATS is unavailable`,
      });
      return;
    }
    this.queue.push(pc);
    metrics.commandsQueued.set(this.queue.length);
  }

  /** Sends what waited (the NATS connection is back). */
  flush(): void {
    while (this.queue.length > 0 && this.o.publisher())
      this.send(this.queue.shift() as PolicyCommand);
    this.o.metrics.commandsQueued.set(0);
  }

  /** Resolves when every command sent so far has its outcome. */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  private send(pc: PolicyCommand): void {
    const { metrics } = this.o;
    const publisher = this.o.publisher() as ControlPublisher;
    const type = pc.command.type;
    metrics.commandsSent.inc({ type });
    const t0 = performance.now();
    const elapsed = () => Math.round((performance.now() - t0) * 10) / 10;
    const p = (async () => {
      try {
        if (pc.worker === "broadcast") {
          const r = await publisher.broadcast(pc.command, pc.id ? { id: pc.id } : {});
          for (const a of r.acks) metrics.commandsAcked.inc({ type, status: a.status });
          if (r.silent.length)
            metrics.commandsFailed.inc({ type, error: "silent" }, r.silent.length);
          this.o.onOutcome(pc, { state: "acked", id: r.id, acks: r.acks, elapsedMs: elapsed() });
        } else {
          const ack = await publisher.send(pc.worker, pc.command, pc.id ? { id: pc.id } : {});
          metrics.commandsAcked.inc({ type, status: ack.status });
          this.o.onOutcome(pc, { state: "acked", id: ack.id, acks: [ack], elapsedMs: elapsed() });
        }
      } catch (e) {
        const err = e as Error & { id?: string };
        metrics.commandsFailed.inc({ type, error: err.name || "Error" });
        this.o.log.warn(`gateway: command ${type} to ${pc.worker} failed: ${err.message}`);
        this.o.onOutcome(pc, {
          state: "failed",
          id: typeof err.id === "string" ? err.id : null,
          error: err.message,
          elapsedMs: elapsed(),
        });
      }
    })();
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }
}
