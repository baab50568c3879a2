// The one place a decision's steps change the policy's state and leave it as commands, log lines
// and metrics, in the order the decision recorded them (tx.ts).
import { decisionLine } from "../contract/decision-log.js";
import type { PolicyCommand } from "../contract/policy.js";
import type { CommandGuards } from "./guards.js";
import type { PolicyMetrics } from "./metrics.js";
import type { AckDecision, PolicyState, Step, Tx } from "./tx.js";

/** Which rule sent a command still waiting for its answer, the command as it emitted it, and what it decides on the answer. */
export interface AckRoute {
  policy: string;
  rule: string;
  pc: PolicyCommand;
  onAck?: AckDecision;
}

/** The commands waiting for their answers, by id (PolicyCommand.id). */
export type AckRoutes = Map<string, AckRoute>;

/**
 * Commands remembered at most: past it the oldest is forgotten (its late ack then reaches no rule).
 * An answer is normally a round trip away; what stays is what never gets one (a release the
 * gateway found nothing left to send for).
 */
const MAX_AWAITED = 1 << 16;

export interface Outlet {
  guards: CommandGuards;
  metrics: PolicyMetrics;
  log: (line: string) => void;
  decisionLog: ((line: string) => void) | null;
  /** The commands of the observation being handled. */
  out: PolicyCommand[];
  acks: AckRoutes;
}

/** A metrics label from a reason: its words before the first ':' or '(' (numbers stay in the log line). */
export function reasonLabel(reason: string): string {
  return reason.split(/[:(]/)[0].trim().slice(0, 64);
}

export function commit(tx: Tx<unknown>, st: PolicyState, o: Outlet): void {
  for (const s of tx.steps) apply(s, tx, st, o);
}

function apply(s: Step, tx: Tx<unknown>, st: PolicyState, o: Outlet): void {
  const line = (fields: Record<string, unknown>) =>
    o.decisionLog?.(decisionLine(tx.now, "policy", fields));
  switch (s.op) {
    case "emit":
      return applyEmit(s, tx, o, line);
    case "note":
      o.metrics.decisions.inc({
        policy: s.policy,
        action: s.action,
        reason: reasonLabel(s.reason),
      });
      return line({ policy: s.policy, action: s.action, reason: s.reason, ...s.fields });
    case "bad":
      o.metrics.badInput.inc({ kind: s.kind });
      o.log(
        `kvctl policy: ${s.kind}${s.session !== null ? ` (session ${JSON.stringify(s.session)})` : ""}: ${s.message}`,
      );
      return line({
        policy: "input",
        action: "bad_input",
        kind: s.kind,
        session: s.session,
        reason: s.message,
      });
    case "session":
      if (s.view === null) st.sessions.delete(s.id);
      else {
        if (s.touch) st.sessions.delete(s.id);
        st.sessions.set(s.id, s.view);
      }
      return;
    case "hold":
      return st.budget.hold(s.worker, s.hashes, s.h);
    case "release":
      st.budget.release(s.worker, s.hashes, s.session, s.kind);
      return;
    case "lose":
      return st.budget.lose(s.worker, s.hash, s.session, s.kind);
    case "keepLostOnly":
      return st.budget.keepLostOnly(s.worker, s.session, s.named);
    case "markFull":
      return st.budget.markFull(s.worker);
    case "takeDecision":
      st.programDecisions.delete(s.id);
      return;
    case "duration":
      return st.durations.record(s.name, s.seconds);
    case "toolWait":
      return o.metrics.toolWait.observe({ kind: s.kind }, s.seconds);
    case "own":
      st.own.set(tx.rule, s.value);
      return;
  }
}

function applyEmit(
  s: Extract<Step, { op: "emit" }>,
  tx: Tx<unknown>,
  o: Outlet,
  line: (fields: Record<string, unknown>) => void,
): void {
  const { pc, policy } = s;
  const type = pc.command.type;
  if (s.verdict !== "coalesced") o.guards.take(pc.worker, s.key, tx.now, s.verdict === "send");
  if (s.verdict !== "send") {
    o.metrics.guarded.inc({ policy, type, verdict: s.verdict });
    line({
      policy,
      action: type,
      worker: pc.worker,
      session: pc.sessionId ?? null,
      reason: pc.reason,
      verdict: s.verdict,
    });
    return;
  }
  o.metrics.decisions.inc({ policy, action: type, reason: reasonLabel(pc.reason) });
  line({
    policy,
    action: type,
    worker: pc.worker,
    session: pc.sessionId ?? null,
    reason: pc.reason,
  });
  o.acks.set(pc.id as string, { policy, rule: tx.rule, pc, onAck: s.onAck });
  if (o.acks.size > MAX_AWAITED) o.acks.delete(o.acks.keys().next().value as string);
  o.out.push(pc);
}
