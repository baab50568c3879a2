// Tool calls -> keep or offload (Continuum-style). A response ending in tool calls starts a tool
// wait; from the tool's online duration distribution the rule picks the TTL tau that maximizes
// P(all calls return within tau) x re-prefill time saved - blocks held x expected hold time x the
// exchange rate. A positive best keeps the session's blocks resident (pin with TTL tau), otherwise
// ToolStart offloads them to host. The next request carrying the tool results (or a tool_end hint)
// ends the wait: the actual duration feeds the distribution and is recorded beside the prediction,
// and ToolEnd goes out with the epoch ToolStart returned. A keep pin stays until that request is
// served: it is what the request is served from, and while the request waits in the worker's
// queue nothing else protects those blocks (its end unpins them, after their hits were counted).
import type { Observation, SessionHint, TurnFinished, TurnStarted } from "../../contract/observations.js";
import { type PolicyContext, reusableChain, SAFE_ID, type SessionView, type ToolWait } from "../context.js";
import { bestKeep, type DurationModel } from "../duration-model.js";
import { release } from "./idle.js";
import { makeRoom } from "./make-room.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "tool_calls";
const TOOL_FINISH = new Set(["tool_calls", "tool_use", "function_call"]);

/** A keep pin whose wait is over, held until the request carrying the tool results is served. */
interface Serving {
  worker: string;
  sessionId: string;
  /** The wait's blocks (the keep pin's command), and those of them still held when it ended. */
  of: bigint[];
  blocks: bigint[];
  /** When the last of its holds runs out: past it there is nothing left to unpin. */
  expiresAt: number;
}

/** Requests carrying tool results, by request id, whose keep pin waits for them to be served. */
type ServingMap = Map<string, Serving>;

/** Unpins what is still held of a keep pin and releases it from the budget view. */
function unkeep(ctx: PolicyContext, worker: string, sessionId: string, blocks: readonly bigint[], reason: string): void {
  // Blocks whose hold already ran out (TTL) are not the gateway's to unpin any more.
  const still = ctx.budget.release(worker, blocks, sessionId, "tool");
  if (still.length) ctx.emit(NAME, { worker, sessionId, reason, hold: "tool", command: { type: "Cache", block_hashes: still, pin: false } }, { essential: true });
}

function startWait(ctx: PolicyContext, model: DurationModel, serving: ServingMap, s: SessionView, worker: string, names: (string | null)[], callIds: string[], why: string): void {
  if (!waitMayOpen(ctx, s)) return;
  const cfg = ctx.cfg.tools;
  const blocks = reusableChain(s);
  const benefit = (blocks.length * pageSizeOf(ctx, worker)) / cfg.prefillTokensPerSecond;
  const best = bestKeep(model, names.length ? names : [null], blocks.length, benefit, cfg.tauCandidatesSeconds, cfg.holdCostPerBlockSecond);
  const predicted = Math.max(...(names.length ? names : [null]).map((n) => model.median(n)));
  const detail = `P(<=${best.tauSeconds}s)=${best.p.toFixed(2)} x ${best.benefitSeconds.toFixed(3)}s vs hold ${best.costSeconds.toFixed(3)}s`;
  const wait: OpenWait = { worker, names, callIds, startedAt: ctx.now, predictedSeconds: predicted, blocks, epoch: null };
  // Program admission decided this boundary already (its slot and the KV are one decision): follow it.
  const gate = ctx.programDecisions.get(s.id);
  ctx.programDecisions.delete(s.id);
  if (gate?.action === "let_go") {
    ctx.note(NAME, "skip", "let go by program admission's retention decision", { session: s.id, worker });
    s.tool = { mode: "none", ...wait };
    return;
  }
  // Keep and offload both hold the host copies, from the same pin budget: past it the worker would
  // hold part of the path (useless to a prefix match) and an offload would still free the GPU.
  // An admitted program's working set comes before parked sessions and markers: they yield.
  // (makeRoom notes the skip with its reason.)
  if (!makeRoom(ctx, s, worker, blocks, { policy: NAME, kind: "tool", share: null }, release)) {
    // Still a wait: the tool results close it, and its duration teaches the model.
    s.tool = { mode: "none", ...wait };
    return;
  }
  if (gate?.action === "keep") keepThroughWait(ctx, serving, s, wait, gate.ttlSeconds, `keep (${why}): program admission's retention decision, TTL ${gate.ttlSeconds}s`);
  else if (gate?.action === "park") offloadForWait(ctx, s, wait, `offload (${why}): parked by program admission's retention decision`);
  else if (best.net > 0) keepThroughWait(ctx, serving, s, wait, best.tauSeconds, `keep (${why}): ${detail}`);
  else offloadForWait(ctx, s, wait, `offload (${why}): ${detail}`);
}

/** A tool wait about to open, before its mode is chosen. */
type OpenWait = Omit<ToolWait, "mode">;

/** Whether a new tool wait may open for s (a superseded ending wait is closed first). */
function waitMayOpen(ctx: PolicyContext, s: SessionView): boolean {
  if (s.tool?.ending) {
    // The worker ends the old offload itself when the new ToolStart arrives.
    ctx.note(NAME, "skip", "ToolEnd of the previous wait superseded by the next ToolStart", { session: s.id });
    ctx.budget.release(s.tool.worker, s.tool.blocks, s.id, "tool");
    s.tool = null;
  }
  if (s.tool) {
    ctx.note(NAME, "skip", "tool wait already open", { session: s.id });
    return false;
  }
  if (!s.chain.length || s.worker === null) {
    ctx.bad("tool_start_without_blocks", "a tool wait began for a session with no blocks known on any worker", s.id);
    return false;
  }
  return true;
}

/** Keeps the session's blocks resident through the wait: a pin with TTL tau. */
function keepThroughWait(ctx: PolicyContext, serving: ServingMap, s: SessionView, wait: OpenWait, tau: number, reason: string): void {
  const { worker, blocks } = wait;
  const sent = ctx.emit(
    NAME,
    { worker, sessionId: s.id, hold: "tool", reason, command: { type: "Cache", block_hashes: blocks, pin: true, ttl_seconds: tau } },
    {
      onAck: (a) => {
        if (a.status === "applied" || a.status === "duplicate" || a.status === "partial" || a.status === "noop") return;
        // Released once: by the wait still open, or by the request it waits to be served for;
        // a keep already released holds nothing here to undo.
        const waiting = [...serving].find(([, k]) => k.of === blocks);
        if (s.tool?.blocks === blocks) s.tool = null;
        else if (waiting) serving.delete(waiting[0]);
        else return;
        ctx.budget.release(a.worker, blocks, s.id, "tool");
        ctx.note(NAME, "undo", `keep pin ${a.status}: ${a.detail ?? ""}`, { session: s.id });
      },
    },
  );
  if (!sent) return;
  ctx.budget.hold(worker, blocks, { session: s.id, kind: "tool", ttlSeconds: tau, expiresAt: ctx.now + tau * 1000 });
  s.tool = { mode: "keep", ...wait };
}

/** Offloads the session's blocks to host for the wait (ToolStart; ToolEnd once the epoch is known). */
function offloadForWait(ctx: PolicyContext, s: SessionView, wait: OpenWait, reason: string): void {
  const { worker, blocks } = wait;
  const cfg = ctx.cfg.tools;
  const sent = ctx.emit(
    NAME,
    { worker, sessionId: s.id, reason, command: { type: "ToolStart", session_id: SAFE_ID(s.id), block_hashes: blocks } },
    {
      onAck: (a) => {
        const t = s.tool;
        if (a.status !== "applied" && a.status !== "partial" && a.status !== "duplicate") ctx.budget.release(a.worker, blocks, s.id, "tool");
        if (t?.blocks !== blocks) return;
        if ((a.status === "applied" || a.status === "partial" || a.status === "duplicate") && a.epoch != null) {
          t.epoch = a.epoch;
          if (t.ending !== undefined) {
            s.tool = null;
            sendToolEnd(ctx, s, t, t.ending);
          }
        } else if (a.status !== "applied" && a.status !== "partial") {
          s.tool = null;
          ctx.note(NAME, "undo", `ToolStart ${a.status}: ${a.detail ?? ""}`, { session: s.id });
        }
      },
    },
  );
  if (!sent) return;
  s.tool = { mode: "offload", ...wait };
  ctx.budget.hold(worker, blocks, { session: s.id, kind: "tool", ttlSeconds: cfg.offloadHoldSeconds, expiresAt: ctx.now + cfg.offloadHoldSeconds * 1000 });
}

function sendToolEnd(ctx: PolicyContext, s: SessionView, t: ToolWait, why: string): void {
  ctx.budget.release(t.worker, t.blocks, s.id, "tool");
  ctx.emit(NAME, { worker: t.worker, sessionId: s.id, reason: `tool returned (${why})`, command: { type: "ToolEnd", session_id: SAFE_ID(s.id), epoch: t.epoch as number } }, { essential: true });
}

/**
 * Ends the tool wait. `requestId`: the request carrying the tool results, which a keep pin then
 * stays for until it is served; null (a hint, the session's close): the pin goes now.
 */
function endWait(ctx: PolicyContext, model: DurationModel, serving: ServingMap, s: SessionView, why: string, requestId: string | null): void {
  const t = s.tool;
  if (!t || t.ending !== undefined) return;
  const actual = (ctx.now - t.startedAt) / 1000;
  for (const n of t.names.length ? t.names : [null]) model.record(n, actual);
  ctx.metrics.toolWait.observe({ kind: "predicted" }, t.predictedSeconds);
  ctx.metrics.toolWait.observe({ kind: "actual" }, actual);
  const fields = { session: s.id, tools: t.names, predicted_s: t.predictedSeconds, actual_s: actual };
  if (t.mode === "offload" && t.epoch === null) {
    // Without the epoch the worker would refuse ToolEnd, and its hold would last until its own
    // expiry: end the wait as soon as the ack arrives.
    t.ending = why;
    ctx.note(NAME, "returned", "offloaded; ToolEnd waits for ToolStart's epoch", fields);
    return;
  }
  s.tool = null;
  if (t.mode === "none") {
    ctx.note(NAME, "returned", "nothing was held", fields);
    return;
  }
  if (t.mode === "keep") {
    const held = ctx.budget.holdsOf(t.worker, s.id, "tool");
    const still = t.blocks.filter((h) => held.has(h));
    if (!still.length) {
      ctx.note(NAME, "skip", `tool returned (${why}) after the keep TTL ran out`, fields);
      return;
    }
    if (requestId !== null) {
      // A turn that never reports back: its entry goes once the holds it names have run out.
      for (const [id, k] of serving) if (k.expiresAt <= ctx.now) serving.delete(id);
      let expiresAt = 0;
      for (const h of still) for (const p of held.get(h) ?? []) expiresAt = Math.max(expiresAt, p.expiresAt ?? Number.POSITIVE_INFINITY);
      serving.set(requestId, { worker: t.worker, sessionId: s.id, of: t.blocks, blocks: still, expiresAt });
      ctx.note(NAME, "returned", "kept (unpinned once the request with the results is served)", fields);
      return;
    }
    unkeep(ctx, t.worker, s.id, still, `tool returned (${why}): unpin`);
    ctx.note(NAME, "returned", "kept", fields);
    return;
  }
  sendToolEnd(ctx, s, t, why);
  ctx.note(NAME, "returned", "offloaded", fields);
}

function onFinished(o: TurnFinished, ctx: PolicyContext, model: DurationModel, serving: ServingMap): void {
  // The request the keep pin stayed for is over, served or not (a failure, a refusal, the client
  // gone): the pin goes. Its hits were counted before the rules ran, and it goes before a tool call
  // in this response starts the next wait, which pins the session's blocks afresh.
  const k = serving.get(o.requestId);
  if (k) {
    serving.delete(o.requestId);
    unkeep(ctx, k.worker, k.sessionId, k.blocks, `tool results served (${o.status || o.error || "no answer"}): unpin`);
  }
  if (!o.sessionId || o.status !== 200) return;
  const isTool = (o.finishReason !== null && TOOL_FINISH.has(o.finishReason)) || o.toolCalls.length > 0;
  if (!isTool) return;
  const s = ctx.session(o.sessionId);
  startWait(ctx, model, serving, s, o.worker, o.toolCalls.map((c) => c.name), o.toolCalls.flatMap((c) => (c.id ? [c.id] : [])), `finish_reason ${o.finishReason}`);
}

function onStarted(o: TurnStarted, ctx: PolicyContext, model: DurationModel, serving: ServingMap): void {
  if (!o.sessionId) return;
  const s = ctx.sessions.get(o.sessionId);
  if (o.tail?.role !== "tool") {
    // The program is back without the call's results in its prompt (it compacted or rewrote its
    // history): the wait is over all the same. Left open, it would refuse the waits of the calls
    // this request makes, and their results would then name calls it never opened.
    if (s?.tool) endWait(ctx, model, serving, s, "next request without tool results (history rewritten)", o.requestId);
    return;
  }
  const ids = o.tail.toolCallIds;
  if (!s?.tool) {
    ctx.bad("tool_result_unknown_call", `tool results (${ids.join(", ") || "no ids"}) for no open tool call`, o.sessionId);
    return;
  }
  if (ids.length && s.tool.callIds.length && !ids.some((id) => s.tool?.callIds.includes(id))) {
    ctx.bad("tool_result_unknown_call", `tool results for ${ids.join(", ")}, the open calls are ${s.tool.callIds.join(", ")}; ending the wait anyway`, o.sessionId);
  }
  endWait(ctx, model, serving, s, "tool results in the prompt", o.requestId);
}

function onHint(o: SessionHint, ctx: PolicyContext, model: DurationModel, serving: ServingMap): void {
  const s = ctx.sessions.get(o.sessionId);
  if (o.event === "close") {
    // A closed session holds nothing: a keep pin waiting for its request to be served goes now
    // (that request's end then finds nothing to release).
    for (const [id, k] of serving) {
      if (k.sessionId !== o.sessionId) continue;
      serving.delete(id);
      unkeep(ctx, k.worker, k.sessionId, k.blocks, "session closed: unpin");
    }
  }
  if (o.event === "tool_start") {
    if (!s) return ctx.bad("hint_unknown_session", "tool_start for a session this replica has no turn of", o.sessionId);
    if (s.worker) startWait(ctx, model, serving, s, s.worker, [o.toolName], o.toolCallId ? [o.toolCallId] : [], "hint");
    return;
  }
  if (o.event === "tool_end" || o.event === "close") {
    if (!s?.tool) {
      if (o.event === "tool_end") ctx.bad("tool_result_unknown_call", `tool_end${o.toolCallId ? ` for ${o.toolCallId}` : ""} with no open tool call`, o.sessionId);
      return;
    }
    if (o.event === "tool_end" && o.toolCallId && s.tool.callIds.length && !s.tool.callIds.includes(o.toolCallId)) {
      ctx.bad("tool_result_unknown_call", `tool_end for ${o.toolCallId}, the open calls are ${s.tool.callIds.join(", ")}; ending the wait anyway`, o.sessionId);
    }
    endWait(ctx, model, serving, s, o.event === "close" ? "session closed" : "hint", null);
  }
}

export function toolsRule(model: DurationModel): AgentRule {
  const serving: ServingMap = new Map();
  return {
    name: NAME,
    observe(o: Observation, ctx: PolicyContext) {
      if (o.type === "TurnFinished") onFinished(o, ctx, model, serving);
      else if (o.type === "TurnStarted") onStarted(o, ctx, model, serving);
      else if (o.type === "SessionHint") onHint(o, ctx, model, serving);
      else if (o.type === "WorkerCleared" && o.reason === "restart") {
        // A restarted worker holds no pins: nothing is left there to unpin.
        for (const [id, k] of serving) if (k.worker === o.worker) serving.delete(id);
      }
    },
  };
}
