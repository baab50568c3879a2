// One decision as a transaction. A rule (or the policy's own upkeep) reads the policy's state as it
// stood when the transaction began, plus what the transaction itself recorded so far; it changes
// nothing. Every command, note and change of state is a step, and commit.ts applies the steps in
// order, in one place, once the rule returned: a rule that throws leaves nothing applied and sends
// nothing.
import type { CommandAcked } from "../contract/observations.js";
import type { PolicyCommand, TenantPinCaps } from "../contract/policy.js";
import type { PoliciesConfig } from "../contract/policies-config.js";
import { uuidv7 } from "../protocol/uuidv7.js";
import type { BlockOwners } from "./block-owners.js";
import type { DurationModel } from "./duration-model.js";
import type { CommandGuards, GuardVerdict } from "./guards.js";
import type { PinBudget, PinHold } from "./pin-budget.js";
import { SessionsDraft } from "./sessions-draft.js";
import { newSessionView, patched, type SessionView } from "./session-view.js";

export interface ProgramDecision {
  action: "keep" | "park" | "let_go";
  ttlSeconds: number;
}

/** The policy's state. Only commit changes it (and the policy's upkeep of plain facts: page sizes, hits, expiry). */
export interface PolicyState {
  readonly cfg: PoliciesConfig;
  readonly sessions: Map<string, SessionView>;
  readonly budget: PinBudget;
  readonly pageSizes: Map<string, number>;
  /** Program admission's retention decisions by session, not yet taken up by the tool rule. */
  readonly programDecisions: Map<string, ProgramDecision>;
  /** Which blocks more than one session has stood on (what a session's end must leave). */
  readonly blockOwners: BlockOwners;
  readonly durations: DurationModel;
  /** What each rule remembers between observations, by rule name (replaced, never changed in place). */
  readonly own: Map<string, unknown>;
  readonly maxSessions: number;
  /** Storage keys (SHA-256 hex) of full pages of tokens, as the worker's storage backend names them. */
  readonly storageKeys: (tokens: number[], pageSize: number) => string[];
  /** A tenant's pin caps, null when it has none. */
  readonly tenantCaps: (tenant: string) => TenantPinCaps | null;
}

export type BudgetView = Pick<
  PinBudget,
  | "used"
  | "usedGlobal"
  | "usedBy"
  | "admit"
  | "holdsOf"
  | "heldFor"
  | "workersOf"
  | "shareRoom"
  | "groups"
  | "holdsAt"
  | "wasLost"
>;
export type DurationsView = Pick<DurationModel, "cdf" | "expectedMin" | "median" | "count">;

/** What a decision reads: the state when it began, with its own steps applied. */
export interface PolicyView<S = unknown> {
  readonly cfg: PoliciesConfig;
  readonly now: number;
  readonly sessions: ReadonlyMap<string, SessionView>;
  readonly budget: BudgetView;
  readonly pageSizes: ReadonlyMap<string, number>;
  readonly programDecisions: ReadonlyMap<string, ProgramDecision>;
  readonly blockOwners: Pick<BlockOwners, "sharedPrefix">;
  readonly durations: DurationsView;
  readonly storageKeys: (tokens: number[], pageSize: number) => string[];
  readonly tenantCaps: (tenant: string) => TenantPinCaps | null;
  /** The deciding rule's own state. */
  readonly own: S;
}

export interface EmitOptions<S = unknown> {
  /** Never dropped by the guards (releases). */
  essential?: boolean;
  /** Coalescing key (the same key within the window is sent once); null: never coalesced. */
  coalesce?: string | null;
  /** The worker's answer, decided on in a transaction of the same rule. */
  onAck?: (a: CommandAcked, tx: PolicyTx<S>) => void;
}

/** What a decision records: each call is one step (the return values are what the view says after it). */
export interface Effects<S = unknown> {
  /** The session's view, created when new; touched (last to be forgotten). */
  session(id: string): SessionView;
  /** Replaces the session's view with `patch` applied; returns the new view. */
  patch(id: string, patch: Partial<SessionView>): SessionView;
  dropSession(id: string): void;
  /** Whether the guards let the command out; names it (`pc.id`) when it has no id yet. */
  emit(policy: string, pc: PolicyCommand, opts?: EmitOptions<S>): boolean;
  /** A decision to do nothing (or one without a command), logged and counted. */
  note(policy: string, action: string, reason: string, fields?: Record<string, unknown>): void;
  bad(kind: string, message: string, session?: string | null): void;
  hold(worker: string, hashes: readonly bigint[], h: PinHold): void;
  release(
    worker: string,
    hashes: readonly bigint[],
    session: string,
    kind?: PinHold["kind"],
  ): bigint[];
  lose(worker: string, hash: bigint, session: string, kind: PinHold["kind"]): void;
  keepLostOnly(worker: string, session: string, named: ReadonlySet<bigint>): void;
  markFull(worker: string): void;
  takeProgramDecision(id: string): void;
  /** A tool's measured duration, for its distribution. */
  recordDuration(name: string | null, seconds: number): void;
  observeToolWait(kind: "predicted" | "actual", seconds: number): void;
  setOwn(value: S): void;
}

export type PolicyTx<S = unknown> = PolicyView<S> & Effects<S>;

/** A rule's decision on the answer to one of its commands, in a transaction of that rule (its own state's type erased). */
export type AckDecision = (a: CommandAcked, tx: PolicyTx) => void;

export type Step =
  | {
      op: "emit";
      policy: string;
      pc: PolicyCommand;
      verdict: GuardVerdict;
      key: string | null;
      onAck?: AckDecision;
    }
  | { op: "note"; policy: string; action: string; reason: string; fields: Record<string, unknown> }
  | { op: "bad"; kind: string; message: string; session: string | null }
  | { op: "session"; id: string; view: SessionView | null; touch: boolean }
  | { op: "hold"; worker: string; hashes: readonly bigint[]; h: PinHold }
  | {
      op: "release";
      worker: string;
      hashes: readonly bigint[];
      session: string;
      kind?: PinHold["kind"];
    }
  | { op: "lose"; worker: string; hash: bigint; session: string; kind: PinHold["kind"] }
  | { op: "keepLostOnly"; worker: string; session: string; named: ReadonlySet<bigint> }
  | { op: "markFull"; worker: string }
  | { op: "takeDecision"; id: string }
  | { op: "duration"; name: string | null; seconds: number }
  | { op: "toolWait"; kind: "predicted" | "actual"; seconds: number }
  | { op: "own"; value: unknown };

export class Tx<S = unknown> implements PolicyTx<S> {
  readonly steps: Step[] = [];
  readonly sessions: SessionsDraft;
  private draft: PinBudget | null = null;
  private readonly taken = new Set<string>();
  private ownValue: { v: S } | null = null;

  constructor(
    private readonly st: PolicyState,
    private readonly guards: CommandGuards,
    /** The rule deciding: whose own state this is, and whose the acks of its commands are. */
    readonly rule: string,
    readonly now: number,
  ) {
    this.sessions = new SessionsDraft(st.sessions);
  }

  get cfg(): PoliciesConfig {
    return this.st.cfg;
  }
  get budget(): BudgetView {
    return this.draft ?? this.st.budget;
  }
  get pageSizes(): ReadonlyMap<string, number> {
    return this.st.pageSizes;
  }
  get programDecisions(): ReadonlyMap<string, ProgramDecision> {
    const live = this.st.programDecisions;
    if (!this.taken.size) return live;
    return new Map([...live].filter(([k]) => !this.taken.has(k)));
  }
  get blockOwners(): Pick<BlockOwners, "sharedPrefix"> {
    return this.st.blockOwners;
  }
  get durations(): DurationsView {
    return this.st.durations;
  }
  get storageKeys(): (tokens: number[], pageSize: number) => string[] {
    return this.st.storageKeys;
  }
  get tenantCaps(): (tenant: string) => TenantPinCaps | null {
    return this.st.tenantCaps;
  }
  get own(): S {
    return this.ownValue ? this.ownValue.v : (this.st.own.get(this.rule) as S);
  }

  session(id: string): SessionView {
    const s = this.sessions.get(id);
    const view = s ?? newSessionView(id, this.now);
    this.sessions.put(id, view, true);
    this.steps.push({ op: "session", id, view, touch: true });
    // The least recently seen session is forgotten past the bound.
    if (!s && this.sessions.size > this.st.maxSessions) {
      const first = this.sessions.keys().next().value as string;
      this.sessions.put(first, null, false);
      this.steps.push({ op: "session", id: first, view: null, touch: false });
    }
    return view;
  }

  patch(id: string, p: Partial<SessionView>): SessionView {
    const s = this.sessions.get(id);
    if (!s) throw new Error(`no view of session ${JSON.stringify(id)} to change`);
    const view = patched(s, p);
    this.sessions.put(id, view, false);
    this.steps.push({ op: "session", id, view, touch: false });
    return view;
  }

  dropSession(id: string): void {
    this.sessions.put(id, null, false);
    this.steps.push({ op: "session", id, view: null, touch: false });
  }

  emit(policy: string, pc: PolicyCommand, opts: EmitOptions<S> = {}): boolean {
    // Named here, once: its ack, its hold and its record entry are found by this id downstream.
    pc.id ??= uuidv7();
    const key =
      opts.coalesce === undefined || opts.coalesce === null
        ? null
        : `${pc.command.type}|${pc.worker}|${opts.coalesce}`;
    const pending = this.steps.flatMap((s) =>
      s.op === "emit" && s.verdict === "send" ? [{ worker: s.pc.worker, key: s.key }] : [],
    );
    const verdict = this.guards.verdict(pc.worker, key, opts.essential === true, this.now, pending);
    this.steps.push({
      op: "emit",
      policy,
      pc,
      verdict,
      key,
      onAck: opts.onAck as AckDecision | undefined,
    });
    return verdict === "send";
  }

  note(policy: string, action: string, reason: string, fields: Record<string, unknown> = {}): void {
    this.steps.push({ op: "note", policy, action, reason, fields });
  }

  bad(kind: string, message: string, session: string | null = null): void {
    this.steps.push({ op: "bad", kind, message, session });
  }

  private budgetDraft(): PinBudget {
    this.draft ??= this.st.budget.clone();
    return this.draft;
  }

  hold(worker: string, hashes: readonly bigint[], h: PinHold): void {
    this.budgetDraft().hold(worker, hashes, h);
    this.steps.push({ op: "hold", worker, hashes, h: { ...h } });
  }

  release(
    worker: string,
    hashes: readonly bigint[],
    session: string,
    kind?: PinHold["kind"],
  ): bigint[] {
    this.steps.push({ op: "release", worker, hashes, session, kind });
    return this.budgetDraft().release(worker, hashes, session, kind);
  }

  lose(worker: string, hash: bigint, session: string, kind: PinHold["kind"]): void {
    this.budgetDraft().lose(worker, hash, session, kind);
    this.steps.push({ op: "lose", worker, hash, session, kind });
  }

  keepLostOnly(worker: string, session: string, named: ReadonlySet<bigint>): void {
    this.budgetDraft().keepLostOnly(worker, session, named);
    this.steps.push({ op: "keepLostOnly", worker, session, named });
  }

  markFull(worker: string): void {
    this.budgetDraft().markFull(worker);
    this.steps.push({ op: "markFull", worker });
  }

  takeProgramDecision(id: string): void {
    this.taken.add(id);
    this.steps.push({ op: "takeDecision", id });
  }

  recordDuration(name: string | null, seconds: number): void {
    this.steps.push({ op: "duration", name, seconds });
  }

  observeToolWait(kind: "predicted" | "actual", seconds: number): void {
    this.steps.push({ op: "toolWait", kind, seconds });
  }

  setOwn(value: S): void {
    this.ownValue = { v: value };
    this.steps.push({ op: "own", value });
  }
}
