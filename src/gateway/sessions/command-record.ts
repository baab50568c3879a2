// What the gateway does with each policy command's outcome: one --json-log line, CommandAcked
// observations back to the policy (one per ack), and the command with its ack in its session's
// record (bounded by sessions.maxCommands), off the client's path.
import { decisionLine } from "../../contract/decision-log.js";
import type { Observation } from "../../contract/observations.js";
import type { PolicyCommand } from "../../contract/policy.js";
import type { CommandOutcome } from "./command-sink.js";
import type { HoldResult } from "./holds/holds.js";
import type { CommandRecord, SessionRecord } from "./holds/record.js";
import type { Clock } from "../core/clock.js";
import type { SessionStore } from "./session-store.js";
import type { GatewayLog } from "../core/logger.js";

export interface CommandRecorderOptions {
  sessions: SessionStore;
  clock: Clock;
  maxCommands: number;
  observe: (o: Observation) => void;
  decisionLog: ((line: string) => void) | null;
  log: GatewayLog;
  /**
   * Folds one worker's outcome of a command into the holds its record names (the hold ledger),
   * inside the record's update; returns what to do once that update is stored (null: nothing).
   */
  settle: (
    rec: SessionRecord,
    pc: PolicyCommand,
    worker: string,
    res: HoldResult,
  ) => ((stored: SessionRecord) => void) | null;
  /** The record a sessionless command's hold is named in (the ledger's), if any. */
  recordOf?: (pc: PolicyCommand) => string | null;
}

export class CommandRecorder {
  /** Session-record updates still in flight (settled() waits for them). */
  readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly o: CommandRecorderOptions) {}

  record(pc: PolicyCommand, outcome: CommandOutcome): void {
    const now = this.o.clock.now();
    this.o.decisionLog?.(commandLine(now, pc, outcome));
    for (const o of ackObservations(now, pc, outcome)) this.o.observe(o);
    const sid = pc.sessionId ?? this.o.recordOf?.(pc) ?? null;
    if (sid) this.inSession(sid, pc, outcome, now);
  }

  private inSession(
    sessionId: string,
    pc: PolicyCommand,
    outcome: CommandOutcome,
    now: number,
  ): void {
    const entry = (worker: string, state: string, detail: string | null): CommandRecord => ({
      id: outcome.id,
      worker,
      type: pc.command.type,
      reason: pc.reason,
      createdMs: now,
      state,
      ackedMs: outcome.state === "acked" ? now : null,
      detail,
    });
    // The update runs again on each write conflict: only the stored attempt's afterwards apply.
    let after: ((stored: SessionRecord) => void)[] = [];
    const recorded = this.o.sessions
      .update(sessionId, (rec: SessionRecord) => {
        after = [];
        const settle = (worker: string, res: HoldResult) => {
          const then = this.o.settle(rec, pc, worker, res);
          if (then) after.push(then);
        };
        if (outcome.state === "acked") {
          for (const a of outcome.acks) {
            rec.commands.push(entry(a.worker_id, a.status, a.reason));
            settle(a.worker_id, {
              status: a.status,
              affected: a.affected,
              missing: a.missing,
              skipped: a.skipped,
              epoch: a.epoch === null ? null : Number(a.epoch),
            });
          }
        } else {
          rec.commands.push(entry(pc.worker, outcome.state, outcome.error));
          settle(pc.worker, { status: outcome.state });
        }
        if (rec.commands.length > this.o.maxCommands)
          rec.commands.splice(0, rec.commands.length - this.o.maxCommands);
      })
      .then((stored) => {
        for (const f of after) f(stored);
      })
      .catch((e) =>
        this.o.log.warn(
          `gateway: recording a command in session ${sessionId}: ${(e as Error).message}`,
        ),
      );
    this.pending.add(recorded);
    void recorded.finally(() => this.pending.delete(recorded));
  }
}

function commandLine(now: number, pc: PolicyCommand, outcome: CommandOutcome): string {
  return decisionLine(now, "command", {
    session: pc.sessionId ?? null,
    worker: pc.worker,
    type: pc.command.type,
    reason: pc.reason,
    state: outcome.state,
    id: outcome.id,
    elapsed_ms: outcome.state === "dropped" ? undefined : outcome.elapsedMs,
    acks:
      outcome.state === "acked"
        ? outcome.acks.map((a) => ({ worker: a.worker_id, status: a.status, affected: a.affected }))
        : undefined,
    error: outcome.state === "acked" ? undefined : outcome.error,
  });
}

/** One CommandAcked per worker ack, or one saying the command failed or was dropped. */
export function ackObservations(
  now: number,
  pc: PolicyCommand,
  outcome: CommandOutcome,
): Observation[] {
  const sessionId = pc.sessionId ?? null;
  const commandType = pc.command.type;
  if (outcome.state !== "acked") {
    return [
      {
        type: "CommandAcked",
        at: now,
        sessionId,
        worker: pc.worker,
        commandType,
        status: outcome.state,
        commandId: pc.id ?? null,
        command: pc.command,
        detail: outcome.error,
      },
    ];
  }
  return outcome.acks.map((a) => ({
    type: "CommandAcked",
    at: now,
    sessionId,
    worker: a.worker_id,
    commandType,
    status: a.status,
    commandId: pc.id ?? null,
    command: pc.command,
    affected: a.affected,
    missing: a.missing,
    skipped: a.skipped,
    epoch: a.epoch,
    detail: a.reason,
  }));
}
