// Rewrite -> prune. When a session's new sequence leaves its previous one before the old end
// (compaction, an edited history, a retried tool call, an answer the template re-renders), the old
// branch below the divergence block is dead: Prune(after_block_hash = the first old block the new
// sequence does not share) evicts its descendants on the worker. The worker skips blocks in use
// or pinned; this rule also skips a branch another session of this replica still stands on.
// Session end -> prune. A session that ended (its close hint, or its record expiring) leaves the
// branch below what other sessions share dead too; pruning it at once, instead of leaving it to
// LRU, keeps the device and host room for the sessions still coming back (what SGLang's session
// radix cache does by evicting closed sessions' nodes first).
import type { SessionHint, TurnFinished } from "../../contract/observations.js";
import { commonBlocks, type SessionView } from "../session-view.js";
import type { PolicyTx } from "../tx.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "rewrite";
const END = "session_end";

function prune(
  ctx: PolicyTx,
  s: SessionView,
  old: readonly bigint[],
  worker: string,
  k: number,
  why: string,
  rule = NAME,
): void {
  if (k >= old.length) return;
  const at = old[k];
  for (const other of ctx.sessions.values()) {
    if (other.id !== s.id && other.worker === worker && other.chain.includes(at)) {
      ctx.note(rule, "skip", "another session uses the old branch", {
        session: s.id,
        other: other.id,
      });
      return;
    }
  }
  ctx.emit(
    rule,
    {
      worker,
      sessionId: s.id,
      reason: `${why}: ${rule === END ? "its own branch from" : "diverged at"} block ${k} of ${old.length}`,
      command: { type: "Prune", after_block_hash: at },
    },
    { coalesce: String(at) },
  );
}

function onFinished(o: TurnFinished, ctx: PolicyTx): void {
  if (!o.sessionId || o.status !== 200) return;
  const s = ctx.sessions.get(o.sessionId);
  if (!s?.prevChain.length || s.prevWorker !== o.worker || !o.chain.length) return;
  const k = commonBlocks(s.prevChain, o.chain);
  if (k >= s.prevChain.length) return;
  prune(
    ctx,
    s,
    s.prevChain,
    o.worker,
    k,
    k < s.prevPromptBlocks ? "history rewritten" : "previous output not replayed",
  );
}

function onHint(o: SessionHint, ctx: PolicyTx): void {
  if (o.event !== "rewrite") return;
  const s = ctx.sessions.get(o.sessionId);
  if (!s?.worker || !s.chain.length)
    return ctx.bad(
      "hint_unknown_session",
      "rewrite for a session with no blocks on any worker",
      o.sessionId,
    );
  if (o.keepTokens === null)
    return ctx.note(NAME, "skip", "rewrite hint without keep_tokens: waiting for the next turn", {
      session: s.id,
    });
  prune(
    ctx,
    s,
    s.chain,
    s.worker,
    Math.floor(o.keepTokens / pageSizeOf(ctx, s.worker)),
    "rewrite hint",
  );
}

/** A session that ended leaves its own branch (below what other sessions share) dead on its worker. */
function onClose(o: SessionHint, ctx: PolicyTx): void {
  if (o.event !== "close") return;
  const s = ctx.sessions.get(o.sessionId);
  if (!s?.worker || !s.chain.length) return;
  // A prefix the client marked for caching stays for the sessions to come, shared yet or not.
  const k = Math.max(ctx.blockOwners.sharedPrefix(s.chain), s.markerBlocks);
  if (k >= s.chain.length)
    return ctx.note(END, "skip", "session closed: no block of its own", { session: s.id });
  prune(ctx, s, s.chain, s.worker, k, "session closed", END);
}

/** Session end -> prune; runs after the rules that release the session's holds. */
export const endPruneRule: AgentRule = {
  name: END,
  decide(o, ctx) {
    if (o.type === "SessionHint") onClose(o, ctx);
  },
};

export const pruneRule: AgentRule = {
  name: NAME,
  decide(o, ctx) {
    if (o.type === "TurnFinished") onFinished(o, ctx);
    else if (o.type === "SessionHint") onHint(o, ctx);
  },
};
