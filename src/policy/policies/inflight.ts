// Queued request -> hold its prefix. SGLang protects a request's cached prefix only once the
// request is scheduled; while it waits in the worker's queue its blocks are ordinary cache, and on
// a busy worker the queue outlasts them: the request then recomputes what was cached when it
// arrived. The gateway knows the request is coming (it routed it) and which of its prompt's blocks
// the worker holds (the index's overlap, or the session's last sequence there), so it pins those
// blocks from arrival (TurnStarted) until the turn ends (TurnFinished). Pins protect the host copy
// (the device copy stays evictable), carry a TTL as a backstop for a turn that never reports back,
// and stay within the gateway's view of the worker's pin budget, earliest blocks first.
import type { Observation, TurnFinished, TurnStarted } from "../../gateway/observations.js";
import { commonBlocks, type PolicyContext } from "../context.js";
import type { AgentRule } from "./policy.js";

const NAME = "in_flight";

interface Held {
  worker: string;
  owner: string;
  blocks: bigint[];
}

/** The prompt's blocks the worker is known to hold: its overlap there, else the session's own. */
function knownBlocks(o: TurnStarted, ctx: PolicyContext): bigint[] {
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

export function inflightRule(): AgentRule {
  const held = new Map<string, Held>();

  const start = (o: TurnStarted, ctx: PolicyContext) => {
    const cfg = ctx.cfg.inflight;
    const blocks = knownBlocks(o, ctx);
    if (blocks.length < cfg.minBlocks) return;
    // The hold is the request's own (a session may have turns in flight on two replicas' views).
    const owner = `req:${o.requestId}`;
    const fit = ctx.budget.admit(o.worker, blocks);
    if (fit < cfg.minBlocks) {
      ctx.note(NAME, "skip", `pin budget: room for ${fit} of ${blocks.length} blocks`, { session: o.sessionId, worker: o.worker });
      return;
    }
    const pin = blocks.slice(0, fit);
    const sent = ctx.emit(
      NAME,
      { worker: o.worker, sessionId: o.sessionId, reason: `request queued: hold ${pin.length} cached prefix blocks until it is served`, command: { type: "Cache", block_hashes: pin, pin: true, ttl_seconds: cfg.maxHoldSeconds } },
      {
        onAck: (a) => {
          if (a.status === "applied" || a.status === "duplicate" || a.status === "noop") return;
          const h = held.get(o.requestId);
          if (a.status === "partial") {
            const kept = a.affected ?? 0;
            ctx.budget.release(a.worker, pin.slice(kept), owner, "inflight");
            if (h) h.blocks = pin.slice(0, kept);
            ctx.budget.markFull(a.worker);
            return;
          }
          ctx.budget.release(a.worker, pin, owner, "inflight");
          held.delete(o.requestId);
          ctx.note(NAME, "undo", `pin ${a.status}: ${a.detail ?? ""}`, { session: o.sessionId, worker: a.worker });
        },
      },
    );
    if (!sent) return;
    ctx.budget.hold(o.worker, pin, { session: owner, kind: "inflight", ttlSeconds: cfg.maxHoldSeconds, expiresAt: ctx.now + cfg.maxHoldSeconds * 1000 });
    held.set(o.requestId, { worker: o.worker, owner, blocks: pin });
  };

  const finish = (o: TurnFinished, ctx: PolicyContext) => {
    const h = held.get(o.requestId);
    if (!h) return;
    held.delete(o.requestId);
    // Blocks whose hold already ran out (TTL) are not the gateway's to unpin any more.
    const still = ctx.budget.release(h.worker, h.blocks, h.owner, "inflight");
    if (!still.length) return;
    ctx.emit(NAME, { worker: h.worker, sessionId: o.sessionId, reason: `request served (${o.status || o.error || "no answer"}): release its prefix`, command: { type: "Cache", block_hashes: still, pin: false } }, { essential: true });
  };

  return {
    name: NAME,
    observe(o: Observation, ctx: PolicyContext) {
      if (o.type === "TurnStarted") start(o, ctx);
      else if (o.type === "TurnFinished") finish(o, ctx);
      else if (o.type === "WorkerCleared" && o.reason === "restart") {
        for (const [id, h] of held) if (h.worker === o.worker) held.delete(id);
      }
    },
  };
}
