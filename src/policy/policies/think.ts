// Reasoning -> transient. The blocks holding a turn's reasoning (its token range, located by the
// gateway with the worker's tokenizer) are dead once the template drops them from history: for
// such models they are marked Think(transient) when the turn ends (never written to host or
// storage) and purged at the next user turn. Interleaved-thinking families replay reasoning
// through the tool loop: there the blocks stay as they are while tools run and are marked at the
// turn's end, purged at the next user turn as well. Blocks the new prompt still uses are spared.
import type { TurnFinished, TurnStarted } from "../../contract/observations.js";
import type { PolicyTx, PolicyView } from "../tx.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "reasoning";
const TOOL_FINISH = new Set(["tool_calls", "tool_use", "function_call"]);

export function isInterleaved(
  model: string | null | undefined,
  families: readonly string[],
): boolean {
  if (!model) return false;
  const m = model.toLowerCase();
  return families.some((f) => m.includes(f.toLowerCase()));
}

/** Indices of the chain's blocks holding any token of [start, end). */
export function blocksOfRange(
  start: number,
  end: number,
  pageSize: number,
  chainLength: number,
): [number, number] {
  return [Math.floor(start / pageSize), Math.min(Math.ceil(end / pageSize), chainLength)];
}

const inToolLoop = (o: TurnFinished): boolean =>
  (o.finishReason !== null && TOOL_FINISH.has(o.finishReason)) || o.toolCalls.length > 0;

/** The index of the first block of `o.chain` this rule marks transient at the turn's end (its
 * reasoning's first block), or null when it marks none: the rule is off, there is no reasoning, or
 * interleaved thinking keeps it through the tool loop. */
export function transientFrom(
  o: TurnFinished,
  ctx: Pick<PolicyView, "cfg" | "pageSizes">,
): number | null {
  const r = o.ranges?.reasoning;
  if (!ctx.cfg.think.enabled || !o.sessionId || o.status !== 200 || !r || r.end <= r.start)
    return null;
  const [a, b] = blocksOfRange(r.start, r.end, pageSizeOf(ctx, o.worker), o.chain.length);
  if (b <= a) return null;
  return inToolLoop(o) && isInterleaved(o.model, ctx.cfg.think.interleavedModels) ? null : a;
}

function onFinished(o: TurnFinished, ctx: PolicyTx): void {
  const r = o.ranges?.reasoning;
  if (!o.sessionId || o.status !== 200 || !r || r.end <= r.start) return;
  const [a, b] = blocksOfRange(r.start, r.end, pageSizeOf(ctx, o.worker), o.chain.length);
  if (b <= a) return;
  const blocks = o.chain.slice(a, b);
  const s = ctx.patch(o.sessionId, {
    reasoning: [...ctx.session(o.sessionId).reasoning, { worker: o.worker, blocks }],
  });
  if (transientFrom(o, ctx) === null) {
    ctx.note(NAME, "skip", "interleaved thinking: kept through the tool loop", {
      session: s.id,
      model: o.model,
      blocks: blocks.length,
    });
    return;
  }
  // Everything this session reasoned on this worker since the last user turn is dead from here on.
  const all = s.reasoning.filter((x) => x.worker === o.worker).flatMap((x) => x.blocks);
  const why = isInterleaved(o.model, ctx.cfg.think.interleavedModels)
    ? "turn ended"
    : "template drops reasoning";
  ctx.emit(
    NAME,
    {
      worker: o.worker,
      sessionId: s.id,
      reason: `${why}: ${all.length} reasoning blocks`,
      command: { type: "Think", block_hashes: all, transient: true },
    },
    { coalesce: `${s.id}|${all[all.length - 1]}` },
  );
}

function purge(ctx: PolicyTx, sessionId: string, keep: ReadonlySet<bigint>, why: string): void {
  const s = ctx.sessions.get(sessionId);
  if (!s?.reasoning.length) return;
  const byWorker = new Map<string, bigint[]>();
  let spared = 0;
  for (const r of s.reasoning) {
    for (const h of r.blocks) {
      if (keep.has(h)) {
        spared++;
        continue;
      }
      const l = byWorker.get(r.worker);
      if (l) l.push(h);
      else byWorker.set(r.worker, [h]);
    }
  }
  ctx.patch(sessionId, { reasoning: [] });
  if (spared)
    ctx.note(NAME, "skip", "reasoning blocks still in the new prompt", {
      session: sessionId,
      blocks: spared,
    });
  for (const [worker, blocks] of byWorker) {
    ctx.emit(NAME, {
      worker,
      sessionId,
      reason: `${why}: purge ${blocks.length} reasoning blocks`,
      command: { type: "Think", block_hashes: blocks, transient: false },
    });
  }
}

function onStarted(o: TurnStarted, ctx: PolicyTx): void {
  if (!o.sessionId || o.tail?.role !== "user") return;
  purge(ctx, o.sessionId, new Set(o.promptBlocks ?? []), "next user turn");
}

export const thinkRule: AgentRule = {
  name: NAME,
  decide(o, ctx) {
    if (o.type === "TurnFinished") onFinished(o, ctx);
    else if (o.type === "TurnStarted") onStarted(o, ctx);
    else if (o.type === "SessionHint" && o.event === "close")
      purge(ctx, o.sessionId, new Set(), "session closed");
  },
};
