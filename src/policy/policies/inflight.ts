// Queued request -> hold its prefix. SGLang protects a request's cached prefix only once the
// request is scheduled; while it waits in the worker's queue its blocks are ordinary cache, and on
// a busy worker the queue outlasts them: the request then recomputes what was cached when it
// arrived. The gateway knows the request is coming (it routed it) and which of its prompt's blocks
// the worker holds (the index's overlap, or the session's last sequence there), so it pins those
// blocks from arrival (TurnStarted) until the turn ends (TurnFinished). Pins protect the host copy
// (the device copy stays evictable), carry a TTL as a backstop for a turn that never reports back,
// and stay within the gateway's view of the worker's pin budget, earliest blocks first.
import type { CommandAcked, TurnFinished, TurnStarted } from "../../contract/observations.js";
import { commonBlocks, sentPart, unpinned } from "../session-view.js";
import type { PolicyTx, PolicyView } from "../tx.js";
import { release } from "./idle.js";
import { capPrefix } from "../pin-caps.js";
import { makeRoom } from "./make-room.js";
import type { AgentRule } from "./policy.js";

const NAME = "in_flight";

interface Held {
  readonly worker: string;
  readonly sessionId: string | null;
  readonly owner: string;
  /** The prompt's blocks the worker held when the request arrived (what the hold is for). */
  readonly want: bigint[];
  /** The first `held` of them are pinned (the rest wait for budget). */
  readonly held: number;
}

/** The prompt's blocks the worker is known to hold: its overlap there, else the session's own. */
function knownBlocks(o: TurnStarted, ctx: PolicyView): bigint[] {
  const prompt = o.promptBlocks ?? [];
  if (!prompt.length) return [];
  if (o.overlap) {
    const n = o.overlap.GPU + o.overlap.CPU_PINNED + o.overlap.DISK + o.overlap.EXTERNAL;
    if (n > 0) return prompt.slice(0, Math.min(n, prompt.length));
  }
  const s = o.sessionId ? ctx.sessions.get(o.sessionId) : undefined;
  if (s && s.worker === o.worker) return prompt.slice(0, commonBlocks(prompt, s.chain));
  return [];
}

/** Requests in flight with a hold, or waiting for budget to hold (more of) their prefix, by owner,
 * in arrival order (the order SGLang's queue serves them in): the rule's own state. */
type InFlight = ReadonlyMap<string, Held>;
type InflightTx = PolicyTx<InFlight>;

/** The rule's own state with `owner`'s entry replaced (null: gone). */
function put(ctx: InflightTx, owner: string, h: Held | null): void {
  const next = new Map(ctx.own);
  if (h) next.set(owner, h);
  else next.delete(owner);
  ctx.setOwn(next);
}

/**
 * Pins as much of h's prefix as the budget allows beyond what it holds already. A routed request's
 * prefix ranks above parked sessions and markers: they are preempted (each through its own
 * release) for all of it; when that cannot make room for all of it, what fits is pinned.
 */
function grant(h: Held, ctx: InflightTx): boolean {
  const cfg = ctx.cfg.inflight;
  const rest = h.want.slice(h.held);
  // The request's hold counts toward its session's caps and its tenant's, with the session's own
  // holds: past them only what fits under them is held, whatever room the budget has.
  const holder = {
    id: h.owner,
    lastActivity: ctx.now,
    session: h.sessionId,
    tenant: (h.sessionId && ctx.sessions.get(h.sessionId)?.tenant) || null,
  };
  const under = rest.slice(0, capPrefix(ctx, holder, h.worker, rest).fit);
  const room = ctx.budget.admit(h.worker, under);
  const fit =
    room < under.length &&
    makeRoom(
      ctx,
      holder,
      h.worker,
      under,
      { policy: NAME, kind: "inflight", share: null, noteRefusal: false },
      release,
    )
      ? under.length
      : room;
  if (fit === 0 || (h.held === 0 && fit < cfg.minBlocks)) return false;
  const pin = under.slice(0, fit);
  const from = h.held;
  const sent = ctx.emit(
    NAME,
    {
      worker: h.worker,
      sessionId: h.sessionId,
      hold: "inflight",
      reason: `request queued: hold ${from ? `${pin.length} more of its ${h.want.length}` : `${pin.length} of its ${h.want.length}`} cached prefix blocks until it is served`,
      command: { type: "Cache", block_hashes: pin, pin: true, ttl_seconds: cfg.maxHoldSeconds },
    },
    { onAck: (a, ctx) => pinAcked(h, from, pin, a, ctx) },
  );
  if (!sent) return false;
  ctx.hold(h.worker, pin, {
    session: h.owner,
    of: h.sessionId,
    kind: "inflight",
    ttlSeconds: cfg.maxHoldSeconds,
    expiresAt: ctx.now + cfg.maxHoldSeconds * 1000,
  });
  put(ctx, h.owner, { ...h, held: h.held + pin.length });
  return true;
}

/** The worker's answer to a hold: what it did not pin is not held (past its budget, or gone meanwhile). */
function pinAcked(
  h: Held,
  from: number,
  emitted: bigint[],
  a: CommandAcked,
  ctx: InflightTx,
): void {
  // Blocks the gateway did not send are not held; like blocks gone, they are not asked for again.
  const { sent: pin, cut } = sentPart(emitted, a);
  if (cut.length) ctx.release(a.worker, cut, h.owner, "inflight");
  if (a.status === "applied" || a.status === "duplicate" || a.status === "noop") return;
  const { dropped, refused } = unpinned(pin, a);
  ctx.release(a.worker, dropped, h.owner, "inflight");
  // Still the request this hold was for, holding what this command left it (no later grant since).
  const now = ctx.own.get(h.owner);
  const current = now !== undefined && now.want === h.want && now.held === from + emitted.length;
  if (a.status !== "partial") {
    if (current) put(ctx, h.owner, { ...now, held: from });
    ctx.note(NAME, "undo", `pin ${a.status}: ${a.detail ?? ""}`, {
      session: h.sessionId,
      worker: a.worker,
    });
  } else if (refused > 0) {
    // The refused tail is asked for again when budget comes free; blocks the worker no
    // longer had are not.
    if (current) put(ctx, h.owner, { ...now, held: from + emitted.length - refused });
    ctx.markFull(a.worker);
  }
}

/** Budget came free: the oldest requests still short of their prefix get it first. */
function topUp(ctx: InflightTx, worker: string): void {
  for (const owner of [...ctx.own.keys()]) {
    const h = ctx.own.get(owner);
    if (!h || h.worker !== worker || h.held >= h.want.length) continue;
    if (!grant(h, ctx) && ctx.budget.admit(worker, h.want.slice(h.held, h.held + 1)) === 0) break;
  }
}

function start(o: TurnStarted, ctx: InflightTx): void {
  const want = knownBlocks(o, ctx);
  if (want.length < ctx.cfg.inflight.minBlocks) return;
  // The hold is the request's own (a session may have turns in flight on two replicas' views).
  const h: Held = {
    worker: o.worker,
    sessionId: o.sessionId,
    owner: `req:${o.requestId}`,
    want,
    held: 0,
  };
  put(ctx, h.owner, h);
  if (!grant(h, ctx))
    ctx.note(
      NAME,
      "skip",
      `pin budget: no room yet for ${want.length} blocks; waits for the turns ahead of it`,
      { session: o.sessionId, worker: o.worker },
    );
}

function finish(o: TurnFinished, ctx: InflightTx): void {
  const owner = `req:${o.requestId}`;
  const h = ctx.own.get(owner);
  if (!h) return;
  put(ctx, owner, null);
  // Blocks whose hold already ran out (TTL) are not the gateway's to unpin any more.
  const still = h.held ? ctx.release(h.worker, h.want.slice(0, h.held), h.owner, "inflight") : [];
  if (still.length) {
    ctx.emit(
      NAME,
      {
        worker: h.worker,
        sessionId: o.sessionId,
        hold: "inflight",
        reason: `request served (${o.status || o.error || "no answer"}): release its prefix`,
        command: { type: "Cache", block_hashes: still, pin: false },
      },
      { essential: true },
    );
  }
  topUp(ctx, h.worker);
}

export const inflightRule: AgentRule<InFlight> = {
  name: NAME,
  init: () => new Map(),
  decide(o, ctx) {
    if (o.type === "TurnStarted") start(o, ctx);
    else if (o.type === "TurnFinished") finish(o, ctx);
    else if (o.type === "WorkerCleared" && o.reason === "restart") {
      const next = new Map([...ctx.own].filter(([, h]) => h.worker !== o.worker));
      if (next.size !== ctx.own.size) ctx.setOwn(next);
    }
  },
};
