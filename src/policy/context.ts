// What the policies share: the per-session view this replica keeps, the pin-budget view, the
// guards, and one way out for every decision (emit: a command, logged and counted with its reason;
// note: a decision to do nothing, logged and counted too). Pure: time comes from the observation.
import { createHash } from "node:crypto";
import type { CommandAcked } from "../contract/observations.js";
import { decisionLine } from "../contract/decision-log.js";
import type { PolicyCommand, TenantPinCaps } from "../contract/policy.js";
import type { Command } from "../protocol/index.js";
import { ID_PATTERN } from "../protocol/fields.js";
import { MAX_ID_LENGTH } from "../protocol/limits.js";
import type { PoliciesConfig } from "../contract/policies-config.js";
import type { CommandGuards } from "./guards.js";
import type { PolicyMetrics } from "./metrics.js";
import type { PinBudget } from "./pin-budget.js";
import { BlockOwners } from "./block-owners.js";

export interface ToolWait {
  /** none: the budget had no room, nothing is held; the wait is still timed and closed. */
  mode: "keep" | "offload" | "none";
  worker: string;
  names: (string | null)[];
  callIds: string[];
  startedAt: number;
  predictedSeconds: number;
  blocks: bigint[];
  /** ToolStart's epoch once acked (offload). */
  epoch: number | null;
  /** The tool returned before ToolStart's ack brought the epoch: ToolEnd goes out when it does. */
  ending?: string;
}

export interface SessionView {
  id: string;
  worker: string | null;
  /** The last turn's whole sequence (prompt + output full pages) on `worker`. */
  chain: bigint[];
  /** How many of `chain`'s blocks a later turn can reuse: all of them, or those before this turn's
   * reasoning when the think rule marks it transient (the blocks after it are dead with it). */
  reusableBlocks: number;
  promptBlocks: number;
  /** Blocks up to the client's furthest cache marker: a prefix meant for reuse, which the session's end leaves. */
  markerBlocks: number;
  /** The sequence before the last turn (what a rewrite diverged from), and its worker. */
  prevChain: bigint[];
  prevPromptBlocks: number;
  prevWorker: string | null;
  inFlight: boolean;
  lastActivity: number;
  lease: { id: string; worker: string; blocks: bigint[]; restored: boolean } | null;
  leaseSeq: number;
  /** Demoted to host under a lease (idle or pressure) and not back yet. */
  paused: boolean;
  tool: ToolWait | null;
  /** Reasoning blocks waiting for the next user turn to be purged. */
  reasoning: { worker: string; blocks: bigint[] }[];
  /** The tenant that owns the session (its first turn's), null without auth. */
  tenant: string | null;
}

/** The blocks of the session's last chain a later turn can reuse (what a hold should cover). */
export function reusableChain(s: SessionView): bigint[] {
  return s.chain.slice(0, s.reusableBlocks);
}

export interface EmitOptions {
  /** Never dropped by the guards (releases). */
  essential?: boolean;
  /** Coalescing key (the same key within the window is sent once); null: never coalesced. */
  coalesce?: string | null;
  onAck?: (o: CommandAcked) => void;
}

export interface PolicyContext {
  readonly cfg: PoliciesConfig;
  now: number;
  readonly sessions: Map<string, SessionView>;
  readonly budget: PinBudget;
  readonly metrics: PolicyMetrics;
  readonly pageSizes: Map<string, number>;
  /** Program admission's retention decisions by session, not yet taken up by the tool rule. */
  readonly programDecisions: Map<string, { action: "keep" | "park" | "let_go"; ttlSeconds: number }>;
  /** Which blocks more than one session has stood on (what a session's end must leave). */
  readonly blockOwners: BlockOwners;
  /** Storage keys (SHA-256 hex) of full pages of tokens, as the worker's storage backend names them. */
  readonly storageKeys: (tokens: number[], pageSize: number) => string[];
  /** A tenant's pin caps, null when it has none. */
  readonly tenantCaps: (tenant: string) => TenantPinCaps | null;
  session(id: string): SessionView;
  emit(policy: string, pc: PolicyCommand, opts?: EmitOptions): boolean;
  note(policy: string, action: string, reason: string, fields?: Record<string, unknown>): void;
  bad(kind: string, message: string, session?: string | null): void;
}

export const SAFE_ID = (id: string): string =>
  ID_PATTERN.test(id) && id.length <= MAX_ID_LENGTH - 8 ? id : `sha-${createHash("sha256").update(id).digest("hex").slice(0, 40)}`;

export function newSessionView(id: string, now: number): SessionView {
  return { id, worker: null, chain: [], reusableBlocks: 0, promptBlocks: 0, markerBlocks: 0, prevChain: [], prevPromptBlocks: 0, prevWorker: null, inFlight: false, lastActivity: now, lease: null, leaseSeq: 0, paused: false, tool: null, reasoning: [], tenant: null };
}

/** Blocks the shared-prefix view remembers: tens of thousands of sessions' prefixes. */
const OWNED_BLOCKS = 1 << 18;

export interface ContextDeps {
  cfg: PoliciesConfig;
  budget: PinBudget;
  guards: CommandGuards;
  metrics: PolicyMetrics;
  storageKeys: (tokens: number[], pageSize: number) => string[];
  log: (line: string) => void;
  decisionLog: ((line: string) => void) | null;
  maxSessions: number;
  tenantCaps?: (tenant: string) => TenantPinCaps | null;
}

/** Builds the context; `out` collects the commands of the observation being handled. */
export function createContext(d: ContextDeps, out: PolicyCommand[], acks: WeakMap<Command, { policy: string; cb?: (o: CommandAcked) => void }>): PolicyContext {
  const sessions = new Map<string, SessionView>();
  const line = (fields: Record<string, unknown>) => d.decisionLog?.(decisionLine(ctx.now, "policy", fields));
  const ctx: PolicyContext = {
    cfg: d.cfg,
    now: 0,
    sessions,
    budget: d.budget,
    metrics: d.metrics,
    pageSizes: new Map(),
    programDecisions: new Map(),
    blockOwners: new BlockOwners(OWNED_BLOCKS),
    storageKeys: d.storageKeys,
    tenantCaps: d.tenantCaps ?? (() => null),
    session(id) {
      let s = sessions.get(id);
      if (s) {
        sessions.delete(id);
        sessions.set(id, s);
        return s;
      }
      s = newSessionView(id, ctx.now);
      sessions.set(id, s);
      if (sessions.size > d.maxSessions) sessions.delete(sessions.keys().next().value as string);
      return s;
    },
    emit(policy, pc, opts = {}) {
      const type = pc.command.type;
      const verdict = d.guards.check(pc.worker, opts.coalesce === undefined || opts.coalesce === null ? null : `${type}|${pc.worker}|${opts.coalesce}`, opts.essential === true, ctx.now);
      if (verdict !== "send") {
        d.metrics.guarded.inc({ policy, type, verdict });
        line({ policy, action: type, worker: pc.worker, session: pc.sessionId ?? null, reason: pc.reason, verdict });
        return false;
      }
      d.metrics.decisions.inc({ policy, action: type, reason: reasonLabel(pc.reason) });
      line({ policy, action: type, worker: pc.worker, session: pc.sessionId ?? null, reason: pc.reason });
      acks.set(pc.command, { policy, cb: opts.onAck });
      out.push(pc);
      return true;
    },
    note(policy, action, reason, fields = {}) {
      d.metrics.decisions.inc({ policy, action, reason: reasonLabel(reason) });
      line({ policy, action, reason, ...fields });
    },
    bad(kind, message, session = null) {
      d.metrics.badInput.inc({ kind });
      d.log(`kvctl policy: ${kind}${session !== null ? ` (session ${JSON.stringify(session)})` : ""}: ${message}`);
      line({ policy: "input", action: "bad_input", kind, session, reason: message });
    },
  };
  return ctx;
}

/** A metrics label from a reason: its words before the first ':' or '(' (numbers stay in the log line). */
export function reasonLabel(reason: string): string {
  return reason.split(/[:(]/)[0].trim().slice(0, 64);
}

/**
 * The blocks of a pin command its ack says the worker did not pin: those it did not hold
 * (`missing`) and those past its pin budget (`refused`, the ack's `skipped`: it pins in order and,
 * once the budget is spent, pins no new block, so they are the last of the rest). A block that
 * was evicted meanwhile says nothing about the budget. An ack without those fields (no answer, or
 * rejected) pinned the first `affected`; for a partial one the rest count as refused.
 */
export function unpinned(pin: readonly bigint[], a: CommandAcked): { dropped: bigint[]; refused: number } {
  if (a.status !== "partial" || (a.missing === undefined && a.skipped === undefined)) {
    const kept = a.status === "partial" ? (a.affected ?? 0) : 0;
    return { dropped: pin.slice(kept), refused: a.status === "partial" ? pin.length - kept : 0 };
  }
  const missing = new Set(a.missing ?? []);
  const found = pin.filter((h) => !missing.has(h));
  const refused = Math.min(a.skipped ?? 0, found.length);
  return { dropped: [...pin.filter((h) => missing.has(h)), ...found.slice(found.length - refused)], refused };
}

/** Blocks both chains share from the start. */
export function commonBlocks(a: readonly bigint[], b: readonly bigint[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
