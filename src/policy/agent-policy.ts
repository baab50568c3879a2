// The agent policy: the rules of policies/ behind one GatewayPolicy. For each observation it
// updates the per-session view the rules share, runs every enabled rule in a fixed order, hands
// acks back to the rule that sent the command, and keeps the pin-budget gauges current.
import { Registry } from "prom-client";
import type { CommandAcked, Observation, StoredSessionState, TurnFinished } from "../contract/observations.js";
import type { GatewayPolicy, PolicyCommand, PolicyFactory, TenantPinCaps } from "../contract/policy.js";
import { storageKeys as addonStorageKeys } from "../hash/index.js";
import type { Command } from "../protocol/index.js";
import { type PoliciesConfig, type PoliciesConfigInput, policiesConfigSchema } from "../contract/policies-config.js";
import { createContext, type PolicyContext, reusableChain, type SessionView } from "./context.js";
import { DurationModel } from "./duration-model.js";
import { CommandGuards } from "./guards.js";
import { PolicyMetrics } from "./metrics.js";
import { PinBudget } from "./pin-budget.js";
import { retentionFor } from "./program-retention-setup.js";
import { reconcilePins, resyncSession, storedMarkers } from "./resync.js";
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
}

export interface AgentPolicy extends GatewayPolicy {
  readonly context: PolicyContext;
  readonly durations: DurationModel;
  readonly metrics: PolicyMetrics;
}

function restore(ctx: PolicyContext, s: SessionView, st: StoredSessionState): void {
  const now = ctx.now;
  const live = st.leases.filter((l) => l.ttlSeconds === null || l.atMs + l.ttlSeconds * 1000 > now);
  const l = live[live.length - 1];
  if (l) {
    s.lease = { id: l.leaseId, worker: l.worker, blocks: l.blockHashes.map((h) => BigInt(h)), restored: true };
    const expiresAt = l.ttlSeconds === null ? null : l.atMs + l.ttlSeconds * 1000;
    ctx.budget.hold(l.worker, s.lease.blocks, { session: s.id, kind: "lease", ttlSeconds: l.ttlSeconds, expiresAt });
    const seq = Number(l.leaseId.slice(l.leaseId.lastIndexOf(".") + 1));
    if (Number.isInteger(seq)) s.leaseSeq = seq;
  }
  for (const p of storedMarkers(st, now)) {
    const expiresAt = p.ttlSeconds === null ? null : p.atMs + p.ttlSeconds * 1000;
    if (expiresAt !== null && expiresAt <= now) continue;
    const blocks = p.blockHashes.map((h) => BigInt(h)).filter((h) => !ctx.budget.wasLost(p.worker, s.id, h));
    ctx.budget.hold(p.worker, blocks, { session: s.id, kind: "marker", ttlSeconds: p.ttlSeconds, expiresAt });
  }
  if (st.tool && st.tool.epoch !== null) {
    s.tool = { mode: "offload", worker: st.tool.worker, names: [], callIds: [], startedAt: st.tool.startedMs, predictedSeconds: 0, blocks: [], epoch: st.tool.epoch };
  }
  s.worker = st.worker;
  if (l || storedMarkers(st, now).length || s.tool) ctx.note("restore", "adopt", "session state from the session store", { session: s.id, leases: live.length, pins: st.pins.length, tool: s.tool !== null });
}

function beginFinished(ctx: PolicyContext, o: TurnFinished): void {
  if (!o.sessionId || o.status !== 200) return;
  const s = ctx.session(o.sessionId);
  s.prevChain = s.chain;
  s.prevWorker = s.worker;
  s.prevPromptBlocks = s.promptBlocks;
  if (o.chain.length) {
    s.chain = o.chain;
    ctx.blockOwners.see(s.id, o.chain);
    s.reusableBlocks = transientFrom(o, ctx) ?? o.chain.length;
    const page = ctx.pageSizes.get(o.worker) ?? 1;
    s.promptBlocks = o.promptTokens ? Math.min(Math.floor(o.promptTokens.length / page), o.chain.length) : o.chain.length;
    for (const b of o.cacheMarkers?.breakpoints ?? []) s.markerBlocks = Math.max(s.markerBlocks, Math.floor(b.tokens / page));
  }
  s.worker = o.worker;
}

type AckRoutes = WeakMap<Command, { policy: string; cb?: (a: CommandAcked) => void }>;

export function createAgentPolicy(o: AgentPolicyOptions = {}): AgentPolicy {
  const cfg = policiesConfigSchema.parse(o.config ?? {});
  const metrics = new PolicyMetrics(o.registry);
  const durations = new DurationModel(cfg.tools);
  const out: PolicyCommand[] = [];
  const acks: AckRoutes = new WeakMap();
  const budget = new PinBudget(cfg.pins.budgetBlocks, cfg.pins.globalBudgetBlocks ?? null, (kind, outcome) => metrics.pinOutcomes.inc({ kind, outcome }));
  metrics.openPins = () => budget.open();
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const ctx = createContext(
    {
      cfg,
      budget,
      guards: new CommandGuards(cfg.guards),
      metrics,
      storageKeys: o.storageKeys ?? ((tokens, pageSize) => addonStorageKeys(tokens, { pageSize })),
      log,
      decisionLog: o.decisionLog ?? null,
      maxSessions: o.maxSessions ?? 100_000,
      tenantCaps: o.tenantCaps,
    },
    out,
    acks,
  );
  const rules = enabledRules(cfg, durations);
  const peak = new Map<string, number>();
  const maxSessions = o.maxSessions ?? 100_000;
  const retention = retentionFor(cfg, o.registry ?? new Registry(), o.decisionLog ?? null, (id, d) => {
    // Taken up by the tool rule at the turn's end (observed after the gate's release).
    ctx.programDecisions.delete(id);
    ctx.programDecisions.set(id, d);
    if (ctx.programDecisions.size > maxSessions) ctx.programDecisions.delete(ctx.programDecisions.keys().next().value as string);
  }, durations, (id, worker) => {
    const s = ctx.sessions.get(id);
    return s && s.worker === worker ? reusableChain(s) : null;
  });
  return {
    name: "agent",
    programRetention: retention,
    context: ctx,
    durations,
    metrics,
    observe(ob: Observation): readonly PolicyCommand[] {
      out.length = 0;
      ctx.now = ob.at;
      ctx.budget.expire(ob.at);
      if (!beforeRules(ctx, ob, acks, log)) return [];
      for (const r of rules) {
        try {
          r.observe(ob, ctx);
        } catch (e) {
          log(`kvctl policy: rule ${r.name} threw on ${ob.type}: ${(e as Error).stack ?? e} (its decision is skipped)`);
        }
      }
      afterRules(ctx, ob);
      updatePinGauges(ctx, peak, ob, log);
      return out.slice();
    },
  };
}

function enabledRules(cfg: PoliciesConfig, durations: DurationModel): AgentRule[] {
  const rules: AgentRule[] = [];
  // First: at a turn's end its prefix hold goes before the keep pin the tool rule held for the same
  // blocks, so the keep is their last hold and what they were served from counts as the keep's.
  if (cfg.inflight.enabled) rules.push(inflightRule());
  if (cfg.prune.enabled) rules.push(pruneRule);
  if (cfg.tools.enabled) rules.push(toolsRule(durations));
  if (cfg.think.enabled) rules.push(thinkRule);
  if (cfg.pins.enabled) rules.push(pinsRule);
  if (cfg.idle.enabled) rules.push(idleRule());
  if (cfg.warm.enabled) rules.push(warmRule());
  // Last: a session's end prunes its own branch after every rule has released what it held there.
  if (cfg.prune.enabled && cfg.prune.onClose) rules.push(endPruneRule);
  return rules;
}

/** The shared view brought up to date before the rules see ob; false: the rules do not see it. */
function beforeRules(ctx: PolicyContext, ob: Observation, acks: AckRoutes, log: (line: string) => void): boolean {
  switch (ob.type) {
    case "TurnStarted":
      if (ob.sessionId) {
        const fresh = !ctx.sessions.has(ob.sessionId);
        const s = ctx.session(ob.sessionId);
        // The first turn's tenant owns the session (the gateway refuses other tenants' turns).
        s.tenant ??= ob.tenant ?? null;
        if (fresh && ob.stored) restore(ctx, s, ob.stored);
        else if (ob.stored) resyncSession(ctx, s, ob.stored);
      }
      return true;
    case "TurnFinished":
      // Before the rules run: a hold this turn's end releases was still there when it was served.
      if (ob.status === 200 && ob.usage.cachedTokens) ctx.budget.served(ob.worker, ob.chain.slice(0, Math.floor(ob.usage.cachedTokens / (ctx.pageSizes.get(ob.worker) ?? 1))));
      beginFinished(ctx, ob);
      return true;
    case "WorkerJoined":
      ctx.pageSizes.set(ob.worker, ob.pageSize);
      return true;
    case "WorkerPins":
      reconcilePins(ctx, ob.worker, ob.pins);
      return true;
    case "WorkerCleared":
      // A restarted worker holds no pins: nothing of the budget view is left there.
      if (ob.reason === "restart") ctx.budget.forgetWorker(ob.worker);
      return true;
    case "CommandAcked":
      return ackToRule(ctx, ob, acks, log);
    case "SessionHint":
      if (ctx.sessions.has(ob.sessionId)) return true;
      ctx.bad("hint_unknown_session", `${ob.event} for a session this replica has no turn of`, ob.sessionId);
      return false;
    default:
      return true;
  }
}

/** Hands an ack back to the rule that sent the command; false for a command no rule sent. */
function ackToRule(ctx: PolicyContext, ob: CommandAcked, acks: AckRoutes, log: (line: string) => void): boolean {
  const e = ob.command ? acks.get(ob.command) : undefined;
  if (!e) return false;
  ctx.metrics.acks.inc({ policy: e.policy, type: ob.commandType, status: ob.status });
  if (ob.status === "rejected" || ob.status === "error" || ob.status === "failed" || ob.status === "dropped") {
    log(`kvctl policy: ${e.policy} ${ob.commandType} to ${ob.worker} came back ${ob.status}${ob.detail ? `: ${ob.detail}` : ""}`);
  }
  e.cb?.(ob);
  return true;
}

/** A session's in-flight flag and last activity; a closed session's view is dropped. */
function afterRules(ctx: PolicyContext, ob: Observation): void {
  if (ob.type === "TurnStarted" && ob.sessionId) {
    const s = ctx.session(ob.sessionId);
    s.inFlight = true;
    s.lastActivity = ob.at;
  } else if (ob.type === "TurnFinished" && ob.sessionId) {
    const s = ctx.sessions.get(ob.sessionId);
    if (s) {
      s.inFlight = false;
      s.lastActivity = ob.at;
    }
  } else if (ob.type === "SessionHint" && ob.event === "close") ctx.sessions.delete(ob.sessionId);
}

function updatePinGauges(ctx: PolicyContext, peak: Map<string, number>, ob: Observation, log: (line: string) => void): void {
  for (const w of new Set([...ctx.pageSizes.keys(), ...peak.keys()])) {
    const used = ctx.budget.used(w);
    ctx.metrics.pinBlocks.set({ worker: w }, used);
    // Every rule asks the budget before it holds: a view past it is a bug, said where it happened.
    if (used > ctx.cfg.pins.budgetBlocks && (peak.get(w) ?? 0) <= ctx.cfg.pins.budgetBlocks) {
      const where = `after ${ob.type}${"sessionId" in ob && ob.sessionId ? ` of session ${ob.sessionId}` : ""}`;
      log(`kvctl policy: the pin-budget view of ${w} holds ${used} blocks, over its budget of ${ctx.cfg.pins.budgetBlocks}, ${where} (a bug: every rule asks the budget before it holds)`);
      ctx.note("pin_budget", "over", where, { worker: w, used, holds: ctx.budget.groups(w) });
    }
    if (used > (peak.get(w) ?? -1)) {
      peak.set(w, used);
      ctx.metrics.pinPeak.set({ worker: w }, used);
    }
  }
}

/** The agent policy as the factory createGateway takes (`policy: agentPolicy`). */
export const agentPolicy: PolicyFactory = (env) => createAgentPolicy({ config: env.config, registry: env.registry, log: env.log, decisionLog: env.decisionLog, tenantCaps: env.tenantCaps });
