// The agent policy: the rules of policies/ behind one GatewayPolicy. For each observation it
// brings the per-session view up to date, runs every enabled rule in a fixed order, each deciding
// in its own transaction (tx.ts) that commit.ts applies once it returned, hands acks back to the
// rule that sent the command (a transaction of that rule), and keeps the pin-budget gauges current.
import { Registry } from "prom-client";
import type { CommandAcked, Observation, TurnFinished } from "../contract/observations.js";
import type {
  GatewayPolicy,
  PolicyCommand,
  PolicyFactory,
  TenantPinCaps,
} from "../contract/policy.js";
import { storageKeys as addonStorageKeys } from "../hash/index.js";
import {
  type PoliciesConfig,
  type PoliciesConfigInput,
  policiesConfigSchema,
} from "../contract/policies-config.js";
import { BlockOwners } from "./block-owners.js";
import { commit, type Outlet } from "./commit.js";
import { DurationModel } from "./duration-model.js";
import { CommandGuards } from "./guards.js";
import { PolicyMetrics } from "./metrics.js";
import { PinBudget } from "./pin-budget.js";
import { retentionFor } from "./program-retention-setup.js";
import { reconcilePins, restoreSession, resyncSession } from "./resync.js";
import { reusableChain } from "./session-view.js";
import { type PolicyState, type PolicyTx, Tx } from "./tx.js";
import { idleRule } from "./policies/idle.js";
import { inflightRule } from "./policies/inflight.js";
import { pinsRule } from "./policies/pins.js";
import type { AgentRule } from "./policies/policy.js";
import { endPruneRule, pruneRule } from "./policies/prune.js";
import { thinkRule, transientFrom } from "./policies/think.js";
import { toolsRule } from "./policies/tools.js";
import { warmRule } from "./policies/warm.js";
export interface AgentPolicyOptions {
  config?: PoliciesConfigInput | PoliciesConfig;
  /** Where the policy metrics are registered (the gateway's registry). */
  registry?: Registry;
  /** Operational lines (bad input). */
  log?: (line: string) => void;
  /** One JSON line per decision (the gateway's --json-log stream), or null. */
  decisionLog?: ((line: string) => void) | null;
  /** Storage keys of full pages (default: the addon's SGLang HiCache keys). */
  storageKeys?: (tokens: number[], pageSize: number) => string[];
  /** Sessions this replica keeps a view of (least recently seen dropped first). */
  maxSessions?: number;
  /** A tenant's pin caps (the gateway's auth config), null when it has none. */
  tenantCaps?: (tenant: string) => TenantPinCaps | null;
  /** The clock program admission's retention decisions and gaps are timed on (ms; default
   * Date.now; kvctl sim's virtual clock). */
  now?: () => number;
}

export interface AgentPolicy extends GatewayPolicy {
  /** The policy's state, for reading (only its decisions change it). */
  readonly state: PolicyState;
  readonly durations: DurationModel;
  readonly metrics: PolicyMetrics;
}

/** Blocks the shared-prefix view remembers: tens of thousands of sessions' prefixes. */
const OWNED_BLOCKS = 1 << 18;

/** Who decides the policy's own upkeep of the session views (restore, resync, reconcile, bookkeeping). */
const UPKEEP = "policy";

/** Runs one decision and applies it; false when it threw (then nothing of it is applied). */
type Decide = (rule: string, what: string, f: (tx: PolicyTx) => void) => boolean;

export function createAgentPolicy(o: AgentPolicyOptions = {}): AgentPolicy {
  const cfg = policiesConfigSchema.parse(o.config ?? {});
  const metrics = new PolicyMetrics(o.registry);
  const durations = new DurationModel(cfg.tools);
  const budget = new PinBudget(
    cfg.pins.budgetBlocks,
    cfg.pins.globalBudgetBlocks ?? null,
    (kind, outcome) => metrics.pinOutcomes.inc({ kind, outcome }),
  );
  metrics.openPins = () => budget.open();
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const state = createState(cfg, budget, durations, o);
  const rules = enabledRules(cfg);
  for (const r of rules) if (r.init) state.own.set(r.name, r.init());
  const outlet: Outlet = {
    guards: new CommandGuards(cfg.guards),
    metrics,
    log,
    decisionLog: o.decisionLog ?? null,
    out: [],
    acks: new Map(),
  };
  let now = 0;
  const decide: Decide = (rule, what, f) => {
    const tx = new Tx(state, outlet.guards, rule, now);
    try {
      f(tx);
    } catch (e) {
      log(
        `kvctl policy: ${rule} threw on ${what}: ${(e as Error).stack ?? e} (nothing of its decision applied)`,
      );
      return false;
    }
    commit(tx, state, outlet);
    return true;
  };
  const peak = new Map<string, number>();
  const retention = programRetention(cfg, o, state);
  return {
    name: "agent",
    programRetention: retention,
    state,
    durations,
    metrics,
    observe(ob: Observation): readonly PolicyCommand[] {
      outlet.out = [];
      now = ob.at;
      budget.expire(ob.at);
      if (!beforeRules(state, ob, outlet, decide, log)) return [];
      for (const r of rules) decide(r.name, ob.type, (tx) => r.decide(ob, tx));
      decide(UPKEEP, ob.type, (tx) => afterRules(tx, ob));
      updatePinGauges(state, metrics, peak, ob, decide, log);
      return outlet.out;
    },
  };
}

/** Program admission's retention, its decisions handed to the tool rule through the state. */
function programRetention(
  cfg: PoliciesConfig,
  o: AgentPolicyOptions,
  state: PolicyState,
): AgentPolicy["programRetention"] {
  return retentionFor(
    cfg,
    o.registry ?? new Registry(),
    o.decisionLog ?? null,
    (id, d) => {
      // Taken up by the tool rule at the turn's end (observed after the gate's release).
      state.programDecisions.delete(id);
      state.programDecisions.set(id, d);
      if (state.programDecisions.size > state.maxSessions)
        state.programDecisions.delete(state.programDecisions.keys().next().value as string);
    },
    state.durations,
    (id, worker) => {
      const s = state.sessions.get(id);
      return s && s.worker === worker ? reusableChain(s) : null;
    },
    o.now,
  );
}

function createState(
  cfg: PoliciesConfig,
  budget: PinBudget,
  durations: DurationModel,
  o: AgentPolicyOptions,
): PolicyState {
  return {
    cfg,
    sessions: new Map(),
    budget,
    pageSizes: new Map(),
    programDecisions: new Map(),
    blockOwners: new BlockOwners(OWNED_BLOCKS),
    durations,
    own: new Map(),
    maxSessions: o.maxSessions ?? 100_000,
    storageKeys: o.storageKeys ?? ((tokens, pageSize) => addonStorageKeys(tokens, { pageSize })),
    tenantCaps: o.tenantCaps ?? (() => null),
  };
}

function enabledRules(cfg: PoliciesConfig): AgentRule[] {
  const rules: AgentRule[] = [];
  // First: at a turn's end its prefix hold goes before the keep pin the tool rule held for the same
  // blocks, so the keep is their last hold and what they were served from counts as the keep's.
  if (cfg.inflight.enabled) rules.push(inflightRule);
  if (cfg.prune.enabled) rules.push(pruneRule);
  if (cfg.tools.enabled) rules.push(toolsRule);
  if (cfg.think.enabled) rules.push(thinkRule);
  if (cfg.pins.enabled) rules.push(pinsRule);
  if (cfg.idle.enabled) rules.push(idleRule);
  if (cfg.warm.enabled) rules.push(warmRule);
  // Last: a session's end prunes its own branch after every rule has released what it held there.
  if (cfg.prune.enabled && cfg.prune.onClose) rules.push(endPruneRule);
  return rules;
}

/** A finished turn's sequence becomes the session's last one (the one before kept for rewrites). */
function beginFinished(tx: PolicyTx, o: TurnFinished): void {
  if (!o.sessionId || o.status !== 200) return;
  const s = tx.session(o.sessionId);
  const page = tx.pageSizes.get(o.worker) ?? 1;
  let markerBlocks = s.markerBlocks;
  for (const b of o.cacheMarkers?.breakpoints ?? [])
    markerBlocks = Math.max(markerBlocks, Math.floor(b.tokens / page));
  const next = o.chain.length
    ? {
        chain: o.chain,
        reusableBlocks: transientFrom(o, tx) ?? o.chain.length,
        promptBlocks: o.promptTokens
          ? Math.min(Math.floor(o.promptTokens.length / page), o.chain.length)
          : o.chain.length,
        markerBlocks,
      }
    : {};
  tx.patch(s.id, {
    prevChain: s.chain,
    prevWorker: s.worker,
    prevPromptBlocks: s.promptBlocks,
    ...next,
    worker: o.worker,
  });
}

/** The view brought up to date before the rules see ob; false: the rules do not see it. */
function beforeRules(
  st: PolicyState,
  ob: Observation,
  outlet: Outlet,
  decide: Decide,
  log: (line: string) => void,
): boolean {
  switch (ob.type) {
    case "TurnStarted": {
      const id = ob.sessionId;
      if (!id) return true;
      return decide(UPKEEP, ob.type, (tx) => {
        const fresh = !tx.sessions.has(id);
        let s = tx.session(id);
        // The first turn's tenant owns the session (the gateway refuses other tenants' turns).
        if (s.tenant === null && (ob.tenant ?? null) !== null)
          s = tx.patch(id, { tenant: ob.tenant ?? null });
        if (fresh && ob.stored) restoreSession(tx, s, ob.stored);
        else if (ob.stored) resyncSession(tx, s, ob.stored);
      });
    }
    case "TurnFinished":
      // Before the rules run: a hold this turn's end releases was still there when it was served.
      if (ob.status === 200 && ob.usage.cachedTokens)
        st.budget.served(
          ob.worker,
          ob.chain.slice(0, Math.floor(ob.usage.cachedTokens / (st.pageSizes.get(ob.worker) ?? 1))),
        );
      if (ob.sessionId && ob.status === 200 && ob.chain.length)
        st.blockOwners.see(ob.sessionId, ob.chain);
      return decide(UPKEEP, ob.type, (tx) => beginFinished(tx, ob));
    case "WorkerJoined":
      st.pageSizes.set(ob.worker, ob.pageSize);
      return true;
    case "WorkerPins":
      return decide(UPKEEP, ob.type, (tx) => reconcilePins(tx, ob.worker, ob.pins));
    case "WorkerCleared":
      // A restarted worker holds no pins: nothing of the budget view is left there.
      if (ob.reason === "restart") st.budget.forgetWorker(ob.worker);
      return true;
    case "CommandAcked":
      return ackToRule(ob, outlet, decide, log);
    case "SessionHint":
      if (st.sessions.has(ob.sessionId)) return true;
      decide(UPKEEP, ob.type, (tx) =>
        tx.bad(
          "hint_unknown_session",
          `${ob.event} for a session this replica has no turn of`,
          ob.sessionId,
        ),
      );
      return false;
    default:
      return true;
  }
}

/**
 * Hands an ack to the rule that sent the command (found by its id), to decide on in a transaction
 * of its own; false for a command no rule sent. The ack carries the command as it was sent, which
 * the rule reads instead of what it emitted (a gateway may have trimmed it).
 */
function ackToRule(
  ob: CommandAcked,
  outlet: Outlet,
  decide: Decide,
  log: (line: string) => void,
): boolean {
  const e = ob.commandId ? outlet.acks.get(ob.commandId) : undefined;
  if (!e) return false;
  // One answer per command sent to a worker; a broadcast's answers (one per worker) keep it.
  if (e.pc.worker !== "broadcast") outlet.acks.delete(ob.commandId as string);
  outlet.metrics.acks.inc({ policy: e.policy, type: ob.commandType, status: ob.status });
  if (
    ob.status === "rejected" ||
    ob.status === "error" ||
    ob.status === "failed" ||
    ob.status === "dropped"
  ) {
    log(
      `kvctl policy: ${e.policy} ${ob.commandType} to ${ob.worker} came back ${ob.status}${ob.detail ? `: ${ob.detail}` : ""}`,
    );
  }
  const onAck = e.onAck;
  if (onAck) decide(e.rule, ob.type, (tx) => onAck(ob, tx));
  return true;
}

/** A session's in-flight flag and last activity; a closed session's view is dropped. */
function afterRules(tx: PolicyTx, ob: Observation): void {
  if (ob.type === "TurnStarted" && ob.sessionId) {
    tx.session(ob.sessionId);
    tx.patch(ob.sessionId, { inFlight: true, lastActivity: ob.at });
  } else if (ob.type === "TurnFinished" && ob.sessionId) {
    if (tx.sessions.has(ob.sessionId))
      tx.patch(ob.sessionId, { inFlight: false, lastActivity: ob.at });
  } else if (ob.type === "SessionHint" && ob.event === "close") tx.dropSession(ob.sessionId);
}

function updatePinGauges(
  st: PolicyState,
  metrics: PolicyMetrics,
  peak: Map<string, number>,
  ob: Observation,
  decide: Decide,
  log: (line: string) => void,
): void {
  const budgetBlocks = st.cfg.pins.budgetBlocks;
  for (const w of new Set([...st.pageSizes.keys(), ...peak.keys()])) {
    const used = st.budget.used(w);
    metrics.pinBlocks.set({ worker: w }, used);
    // Every rule asks the budget before it holds: a view past it is a bug, said where it happened.
    if (used > budgetBlocks && (peak.get(w) ?? 0) <= budgetBlocks) {
      const where = `after ${ob.type}${"sessionId" in ob && ob.sessionId ? ` of session ${ob.sessionId}` : ""}`;
      // Holds adopted from a session record are other replicas' too, taken before this view knew of
      // them: together they can pass the budget (the worker refuses what is past it). Past that, a bug.
      const why =
        ob.type === "TurnStarted" && ob.stored
          ? "with the holds its session record names: other replicas' holds and this view's add up past it; the worker refuses what is past its budget"
          : "a bug: every rule asks the budget before it holds";
      log(
        `kvctl policy: the pin-budget view of ${w} holds ${used} blocks, over its budget of ${budgetBlocks}, ${where} (${why})`,
      );
      decide(UPKEEP, ob.type, (tx) =>
        tx.note("pin_budget", "over", where, { worker: w, used, holds: st.budget.groups(w) }),
      );
    }
    if (used > (peak.get(w) ?? -1)) {
      peak.set(w, used);
      metrics.pinPeak.set({ worker: w }, used);
    }
  }
}

/** The agent policy as the factory createGateway takes (`policy: agentPolicy`). */
export const agentPolicy: PolicyFactory = (env) =>
  createAgentPolicy({
    config: env.config,
    registry: env.registry,
    log: env.log,
    decisionLog: env.decisionLog,
    tenantCaps: env.tenantCaps,
  });
