// Tool calls -> keep or offload (Continuum-style). A response ending in tool calls starts a tool
// wait; from the tool's online duration distribution the rule picks the TTL tau that maximizes
// P(all calls return within tau) x re-prefill time saved - blocks held x expected hold time x the
// exchange rate. A positive best keeps the session's blocks resident (pin with TTL tau), otherwise
// ToolStart offloads them to host. The next request carrying the tool results (or a tool_end hint)
// ends the wait: the actual duration feeds the distribution and is recorded beside the prediction,
// and ToolEnd goes out with the epoch ToolStart returned. A keep pin stays until that request is
// served: it is what the request is served from, and while the request waits in the worker's
// queue nothing else protects those blocks (its end unpins them, after their hits were counted).
import type {
  CommandAcked,
  SessionHint,
  TurnFinished,
  TurnStarted,
} from "../../contract/observations.js";
import {
  reusableChain,
  SAFE_ID,
  type SessionView,
  sentPart,
  type ToolWait,
} from "../session-view.js";
import { bestKeep } from "../duration-model.js";
import type { PolicyTx } from "../tx.js";
import { release } from "./idle.js";
import { makeRoom } from "./make-room.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "tool_calls";
const TOOL_FINISH = new Set(["tool_calls", "tool_use", "function_call"]);
const MAX_CLOSED = 1024;

/** A keep pin whose wait is over, held until the request carrying the tool results is served. */
interface Serving {
  worker: string;
  sessionId: string;
  /** The wait's blocks (the keep pin's command), and those of them still held when it ended. */
  of: readonly bigint[];
  blocks: readonly bigint[];
  /** When the last of its holds runs out: past it there is nothing left to unpin. */
  expiresAt: number;
}

/** Requests carrying tool results, by request id, whose keep pin waits for them to be served: the rule's own state. */
type ServingMap = ReadonlyMap<string, Serving>;

/** What the rule remembers: keep pins waiting for their request to be served, and the offloads of
 * closed sessions whose ToolEnd waits for ToolStart's epoch (their views are gone with them). */
interface ToolsOwn {
  readonly serving: ServingMap;
  readonly closed: readonly { readonly id: string; readonly t: ToolWait }[];
}
type ToolsTx = PolicyTx<ToolsOwn>;

/** The keep pins waiting to be served less those `drop` names. */
function unserve(ctx: ToolsTx, drop: (id: string, k: Serving) => boolean): void {
  const next = new Map([...ctx.own.serving].filter(([id, k]) => !drop(id, k)));
  if (next.size !== ctx.own.serving.size) ctx.setOwn({ ...ctx.own, serving: next });
}

/** A closing session's offload still waiting for its epoch outlives its view: its ToolEnd goes when the epoch comes. */
function keepClosedOffload(ctx: ToolsTx, id: string): void {
  const t = ctx.sessions.get(id)?.tool;
  if (t?.mode !== "offload" || t.epoch !== null) return;
  // An entry goes with its ToolStart's answer when it brings the epoch or refuses; the bound covers
  // answers without either, and a publisher that never answers (the worker ends the offload at its hold).
  ctx.setOwn({ ...ctx.own, closed: [...ctx.own.closed.slice(-(MAX_CLOSED - 1)), { id, t }] });
}

/** Unpins what is still held of a keep pin and releases it from the budget view. */
function unkeep(
  ctx: PolicyTx,
  worker: string,
  sessionId: string,
  blocks: readonly bigint[],
  reason: string,
): void {
  // Blocks whose hold already ran out (TTL) are not the gateway's to unpin any more.
  const still = ctx.release(worker, blocks, sessionId, "tool");
  if (still.length)
    ctx.emit(
      NAME,
      {
        worker,
        sessionId,
        reason,
        hold: "tool",
        command: { type: "Cache", block_hashes: still, pin: false },
      },
      { essential: true },
    );
}

function startWait(
  ctx: ToolsTx,
  s: SessionView,
  worker: string,
  names: (string | null)[],
  callIds: string[],
  why: string,
): void {
  const open = waitMayOpen(ctx, s);
  if (!open) return;
  s = open;
  const blocks = reusableChain(s);
  const { best, predicted, detail } = keepOrOffload(ctx, worker, names, blocks.length);
  const wait: OpenWait = {
    worker,
    names,
    callIds,
    startedAt: ctx.now,
    predictedSeconds: predicted,
    blocks,
    epoch: null,
  };
  // Program admission decided this boundary already (its slot and the KV are one decision): follow it.
  const gate = ctx.programDecisions.get(s.id);
  if (gate) ctx.takeProgramDecision(s.id);
  if (gate?.action === "let_go") {
    ctx.note(NAME, "skip", "let go by program admission's retention decision", {
      session: s.id,
      worker,
    });
    ctx.patch(s.id, { tool: { mode: "none", ...wait } });
    return;
  }
  // Keep and offload both hold the host copies, from the same pin budget: past it the worker would
  // hold part of the path (useless to a prefix match) and an offload would still free the GPU.
  // An admitted program's working set comes before parked sessions and markers: they yield.
  // (makeRoom notes the skip with its reason.)
  if (!makeRoom(ctx, s, worker, blocks, { policy: NAME, kind: "tool", share: null }, release)) {
    // Still a wait: the tool results close it, and its duration teaches the model.
    ctx.patch(s.id, { tool: { mode: "none", ...wait } });
    return;
  }
  if (gate?.action === "keep")
    keepThroughWait(
      ctx,
      s,
      wait,
      gate.ttlSeconds,
      `keep (${why}): program admission's retention decision, TTL ${gate.ttlSeconds}s`,
    );
  else if (gate?.action === "park")
    offloadForWait(
      ctx,
      s,
      wait,
      `offload (${why}): parked by program admission's retention decision`,
    );
  else if (best.net > 0) keepThroughWait(ctx, s, wait, best.tauSeconds, `keep (${why}): ${detail}`);
  else offloadForWait(ctx, s, wait, `offload (${why}): ${detail}`);
}

/** The keep that pays best for a wait on these tools (its TTL and net gain), and the wait predicted. */
function keepOrOffload(
  ctx: ToolsTx,
  worker: string,
  names: (string | null)[],
  blockCount: number,
): { best: ReturnType<typeof bestKeep>; predicted: number; detail: string } {
  const model = ctx.durations;
  const cfg = ctx.cfg.tools;
  const benefit = (blockCount * pageSizeOf(ctx, worker)) / cfg.prefillTokensPerSecond;
  const best = bestKeep(
    model,
    names.length ? names : [null],
    blockCount,
    benefit,
    cfg.tauCandidatesSeconds,
    cfg.holdCostPerBlockSecond,
  );
  const predicted = Math.max(...(names.length ? names : [null]).map((n) => model.median(n)));
  const detail = `P(<=${best.tauSeconds}s)=${best.p.toFixed(2)} x ${best.benefitSeconds.toFixed(3)}s vs hold ${best.costSeconds.toFixed(3)}s`;
  return { best, predicted, detail };
}

/** A tool wait about to open, before its mode is chosen. */
type OpenWait = Omit<ToolWait, "mode">;

/** The session's view when a new tool wait may open for it (a superseded ending wait is closed first), else null. */
function waitMayOpen(ctx: PolicyTx, s: SessionView): SessionView | null {
  if (s.tool?.ending) {
    // The worker ends the old offload itself when the new ToolStart arrives.
    ctx.note(NAME, "skip", "ToolEnd of the previous wait superseded by the next ToolStart", {
      session: s.id,
    });
    ctx.release(s.tool.worker, s.tool.blocks, s.id, "tool");
    s = ctx.patch(s.id, { tool: null });
  }
  if (s.tool) {
    ctx.note(NAME, "skip", "tool wait already open", { session: s.id });
    return null;
  }
  if (!s.chain.length || s.worker === null) {
    ctx.bad(
      "tool_start_without_blocks",
      "a tool wait began for a session with no blocks known on any worker",
      s.id,
    );
    return null;
  }
  return s;
}

/** Keeps the session's blocks resident through the wait: a pin with TTL tau. */
function keepThroughWait(
  ctx: ToolsTx,
  s: SessionView,
  wait: OpenWait,
  tau: number,
  reason: string,
): void {
  const { worker, blocks } = wait;
  const id = s.id;
  const sent = ctx.emit(
    NAME,
    {
      worker,
      sessionId: id,
      hold: "tool",
      reason,
      command: { type: "Cache", block_hashes: [...blocks], pin: true, ttl_seconds: tau },
    },
    {
      onAck: (a, ctx) => {
        // Blocks the gateway did not send are not held; what was sent is undone below if refused.
        const { sent, cut } = sentPart(blocks, a);
        if (cut.length) ctx.release(a.worker, cut, id, "tool");
        if (
          a.status === "applied" ||
          a.status === "duplicate" ||
          a.status === "partial" ||
          a.status === "noop"
        )
          return;
        // Released once: by the wait still open, or by the request it waits to be served for;
        // a keep already released holds nothing here to undo.
        const waiting = [...ctx.own.serving].find(([, k]) => k.of === blocks);
        if (ctx.sessions.get(id)?.tool?.blocks === blocks) ctx.patch(id, { tool: null });
        else if (waiting) unserve(ctx, (rid) => rid === waiting[0]);
        else return;
        ctx.release(a.worker, sent, id, "tool");
        ctx.note(NAME, "undo", `keep pin ${a.status}: ${a.detail ?? ""}`, { session: id });
      },
    },
  );
  if (!sent) return;
  ctx.hold(worker, blocks, {
    session: id,
    kind: "tool",
    ttlSeconds: tau,
    expiresAt: ctx.now + tau * 1000,
  });
  ctx.patch(id, { tool: { mode: "keep", ...wait } });
}

/** Offloads the session's blocks to host for the wait (ToolStart; ToolEnd once the epoch is known). */
function offloadForWait(ctx: ToolsTx, s: SessionView, wait: OpenWait, reason: string): void {
  const { worker, blocks } = wait;
  const cfg = ctx.cfg.tools;
  const id = s.id;
  const sent = ctx.emit(
    NAME,
    {
      worker,
      sessionId: id,
      reason,
      command: { type: "ToolStart", session_id: SAFE_ID(id), block_hashes: [...blocks] },
    },
    { onAck: (a, ctx) => toolStartAcked(ctx, id, blocks, a) },
  );
  if (!sent) return;
  ctx.patch(id, { tool: { mode: "offload", ...wait } });
  ctx.hold(worker, blocks, {
    session: id,
    kind: "tool",
    ttlSeconds: cfg.offloadHoldSeconds,
    expiresAt: ctx.now + cfg.offloadHoldSeconds * 1000,
  });
}

/** ToolStart's answer: its epoch (and the ToolEnd that waited for it), or the offload undone. */
function toolStartAcked(
  ctx: ToolsTx,
  id: string,
  blocks: readonly bigint[],
  a: CommandAcked,
): void {
  if (a.status !== "applied" && a.status !== "partial" && a.status !== "duplicate")
    ctx.release(a.worker, blocks, id, "tool");
  const viewed = ctx.sessions.get(id)?.tool;
  const closed =
    viewed?.blocks === blocks ? undefined : ctx.own.closed.find((c) => c.t.blocks === blocks);
  const t = closed ? closed.t : viewed;
  if (t?.blocks !== blocks) return;
  // The wait is over here either way (but for an answer without the epoch, which changes nothing).
  const over = () =>
    closed
      ? ctx.setOwn({ ...ctx.own, closed: ctx.own.closed.filter((c) => c !== closed) })
      : ctx.patch(id, { tool: null });
  if (
    (a.status === "applied" || a.status === "partial" || a.status === "duplicate") &&
    a.epoch != null
  ) {
    if (t.ending !== undefined) {
      over();
      sendToolEnd(ctx, id, { ...t, epoch: a.epoch }, t.ending);
    } else ctx.patch(id, { tool: { ...t, epoch: a.epoch } });
  } else if (a.status !== "applied" && a.status !== "partial") {
    over();
    ctx.note(NAME, "undo", `ToolStart ${a.status}: ${a.detail ?? ""}`, { session: id });
  }
}

function sendToolEnd(ctx: PolicyTx, id: string, t: ToolWait, why: string): void {
  ctx.release(t.worker, t.blocks, id, "tool");
  ctx.emit(
    NAME,
    {
      worker: t.worker,
      sessionId: id,
      reason: `tool returned (${why})`,
      command: { type: "ToolEnd", session_id: SAFE_ID(id), epoch: t.epoch as number },
    },
    { essential: true },
  );
}

/**
 * Ends the tool wait. `requestId`: the request carrying the tool results, which a keep pin then
 * stays for until it is served; null (a hint, the session's close): the pin goes now.
 */
function endWait(ctx: ToolsTx, s: SessionView, why: string, requestId: string | null): void {
  const t = s.tool;
  if (!t || t.ending !== undefined) return;
  const actual = (ctx.now - t.startedAt) / 1000;
  for (const n of t.names.length ? t.names : [null]) ctx.recordDuration(n, actual);
  ctx.observeToolWait("predicted", t.predictedSeconds);
  ctx.observeToolWait("actual", actual);
  const fields = {
    session: s.id,
    tools: t.names,
    predicted_s: t.predictedSeconds,
    actual_s: actual,
  };
  if (t.mode === "offload" && t.epoch === null) {
    // Without the epoch the worker would refuse ToolEnd, and its hold would last until its own
    // expiry: end the wait as soon as the ack arrives.
    ctx.patch(s.id, { tool: { ...t, ending: why } });
    ctx.note(NAME, "returned", "offloaded; ToolEnd waits for ToolStart's epoch", fields);
    return;
  }
  ctx.patch(s.id, { tool: null });
  if (t.mode === "none") {
    ctx.note(NAME, "returned", "nothing was held", fields);
    return;
  }
  if (t.mode === "keep") return endKeep(ctx, s.id, t, why, requestId, fields);
  sendToolEnd(ctx, s.id, t, why);
  ctx.note(NAME, "returned", "offloaded", fields);
}

/** A keep's wait is over: its pin stays until the request with the results is served, or goes now. */
function endKeep(
  ctx: ToolsTx,
  id: string,
  t: ToolWait,
  why: string,
  requestId: string | null,
  fields: Record<string, unknown>,
): void {
  const held = ctx.budget.holdsOf(t.worker, id, "tool");
  const still = t.blocks.filter((h) => held.has(h));
  if (!still.length) {
    ctx.note(NAME, "skip", `tool returned (${why}) after the keep TTL ran out`, fields);
    return;
  }
  if (requestId !== null) {
    // A turn that never reports back: its entry goes once the holds it names have run out.
    let expiresAt = 0;
    for (const h of still)
      for (const p of held.get(h) ?? [])
        expiresAt = Math.max(expiresAt, p.expiresAt ?? Number.POSITIVE_INFINITY);
    const next = new Map([...ctx.own.serving].filter(([, k]) => k.expiresAt > ctx.now));
    next.set(requestId, {
      worker: t.worker,
      sessionId: id,
      of: t.blocks,
      blocks: still,
      expiresAt,
    });
    ctx.setOwn({ ...ctx.own, serving: next });
    ctx.note(
      NAME,
      "returned",
      "kept (unpinned once the request with the results is served)",
      fields,
    );
    return;
  }
  unkeep(ctx, t.worker, id, still, `tool returned (${why}): unpin`);
  ctx.note(NAME, "returned", "kept", fields);
}

function onFinished(o: TurnFinished, ctx: ToolsTx): void {
  // The request the keep pin stayed for is over, served or not (a failure, a refusal, the client
  // gone): the pin goes. Its hits were counted before the rules ran, and it goes before a tool call
  // in this response starts the next wait, which pins the session's blocks afresh.
  const k = ctx.own.serving.get(o.requestId);
  if (k) {
    unserve(ctx, (id) => id === o.requestId);
    unkeep(
      ctx,
      k.worker,
      k.sessionId,
      k.blocks,
      `tool results served (${o.status || o.error || "no answer"}): unpin`,
    );
  }
  if (!o.sessionId || o.status !== 200) return;
  const isTool =
    (o.finishReason !== null && TOOL_FINISH.has(o.finishReason)) || o.toolCalls.length > 0;
  if (!isTool) return;
  const s = ctx.session(o.sessionId);
  startWait(
    ctx,
    s,
    o.worker,
    o.toolCalls.map((c) => c.name),
    o.toolCalls.flatMap((c) => (c.id ? [c.id] : [])),
    `finish_reason ${o.finishReason}`,
  );
}

function onStarted(o: TurnStarted, ctx: ToolsTx): void {
  if (!o.sessionId) return;
  const s = ctx.sessions.get(o.sessionId);
  if (o.tail?.role !== "tool") {
    // The program is back without the call's results in its prompt (it compacted or rewrote its
    // history): the wait is over all the same. Left open, it would refuse the waits of the calls
    // this request makes, and their results would then name calls it never opened.
    if (s?.tool)
      endWait(ctx, s, "next request without tool results (history rewritten)", o.requestId);
    return;
  }
  const ids = o.tail.toolCallIds;
  if (!s?.tool) {
    ctx.bad(
      "tool_result_unknown_call",
      `tool results (${ids.join(", ") || "no ids"}) for no open tool call`,
      o.sessionId,
    );
    return;
  }
  const open = s.tool.callIds;
  if (ids.length && open.length && !ids.some((id) => open.includes(id))) {
    ctx.bad(
      "tool_result_unknown_call",
      `tool results for ${ids.join(", ")}, the open calls are ${open.join(", ")}; ending the wait anyway`,
      o.sessionId,
    );
  }
  endWait(ctx, s, "tool results in the prompt", o.requestId);
}

function onHint(o: SessionHint, ctx: ToolsTx): void {
  const s = ctx.sessions.get(o.sessionId);
  if (o.event === "close") {
    // A closed session holds nothing: a keep pin waiting for its request to be served goes now
    // (that request's end then finds nothing to release).
    const mine = [...ctx.own.serving.values()].filter((k) => k.sessionId === o.sessionId);
    unserve(ctx, (_, k) => k.sessionId === o.sessionId);
    for (const k of mine) unkeep(ctx, k.worker, k.sessionId, k.blocks, "session closed: unpin");
  }
  if (o.event === "tool_start") {
    if (!s)
      return ctx.bad(
        "hint_unknown_session",
        "tool_start for a session this replica has no turn of",
        o.sessionId,
      );
    if (s.worker)
      startWait(ctx, s, s.worker, [o.toolName], o.toolCallId ? [o.toolCallId] : [], "hint");
    return;
  }
  if (o.event === "tool_end" || o.event === "close") {
    if (!s?.tool) {
      if (o.event === "tool_end")
        ctx.bad(
          "tool_result_unknown_call",
          `tool_end${o.toolCallId ? ` for ${o.toolCallId}` : ""} with no open tool call`,
          o.sessionId,
        );
      return;
    }
    if (
      o.event === "tool_end" &&
      o.toolCallId &&
      s.tool.callIds.length &&
      !s.tool.callIds.includes(o.toolCallId)
    ) {
      ctx.bad(
        "tool_result_unknown_call",
        `tool_end for ${o.toolCallId}, the open calls are ${s.tool.callIds.join(", ")}; ending the wait anyway`,
        o.sessionId,
      );
    }
    endWait(ctx, s, o.event === "close" ? "session closed" : "hint", null);
  }
}

export const toolsRule: AgentRule<ToolsOwn> = {
  name: NAME,
  init: () => ({ serving: new Map(), closed: [] }),
  decide(o, ctx) {
    if (o.type === "TurnFinished") onFinished(o, ctx);
    else if (o.type === "TurnStarted") onStarted(o, ctx);
    else if (o.type === "SessionHint") {
      onHint(o, ctx);
      if (o.event === "close") keepClosedOffload(ctx, o.sessionId);
    }
    // A restarted worker holds no pins: nothing is left there to unpin.
    else if (o.type === "WorkerCleared" && o.reason === "restart")
      unserve(ctx, (_, k) => k.worker === o.worker);
  },
};
