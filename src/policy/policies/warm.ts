// Cold worker -> warm. The prefixes sessions pin with prompt-cache markers are remembered with
// their tokens and hit counts; a worker that joins or restarts (its cache is empty) gets Warm of
// the hottest ones, by their storage keys, when the workers have a storage backend to read from.
import type { TurnFinished } from "../../contract/observations.js";
import type { PolicyTx } from "../tx.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "warm";
const MAX_KNOWN = 256;

interface HotPrefix {
  readonly tokens: number[];
  readonly pageSize: number;
  readonly hits: number;
}

/** The hottest prefixes seen, by page size and last block: the rule's own state. */
type Hot = ReadonlyMap<string, HotPrefix>;

function remember(o: TurnFinished, ctx: PolicyTx<Hot>): void {
  const bps = o.cacheMarkers?.breakpoints;
  if (!bps?.length || !o.promptTokens || o.status !== 200) return;
  const page = pageSizeOf(ctx, o.worker);
  // The longest-lived breakpoint is the shared one (tools, system prompt).
  const bp = bps.reduce((a, b) => (b.ttlSeconds > a.ttlSeconds ? b : a));
  const n = Math.min(Math.floor(bp.tokens / page), o.chain.length);
  if (n === 0) return;
  const key = `${page}|${o.chain[n - 1]}`;
  const hot = new Map(ctx.own);
  const h = hot.get(key);
  if (h) hot.set(key, { ...h, hits: h.hits + 1 });
  else {
    if (hot.size >= MAX_KNOWN) {
      const coldest = [...hot].reduce((a, b) => (b[1].hits < a[1].hits ? b : a))[0];
      hot.delete(coldest);
    }
    hot.set(key, { tokens: o.promptTokens.slice(0, n * page), pageSize: page, hits: 1 });
  }
  ctx.setOwn(hot);
}

function warm(worker: string, pageSize: number, why: string, ctx: PolicyTx<Hot>): void {
  const cfg = ctx.cfg.warm;
  const candidates = [...ctx.own.values()]
    .filter((h) => h.pageSize === pageSize)
    .sort((a, b) => b.hits - a.hits);
  if (!candidates.length) return;
  if (!cfg.storage) {
    ctx.note(NAME, "skip", "no storage backend configured", { worker });
    return;
  }
  for (const h of candidates.slice(0, cfg.maxPrefixes)) {
    const keys = ctx.storageKeys(h.tokens, h.pageSize);
    ctx.emit(
      NAME,
      {
        worker,
        reason: `${why}: prefix of ${keys.length} blocks, ${h.hits} hits`,
        command: {
          type: "Warm",
          block_keys: keys,
          token_ids: h.tokens,
          target_tier: cfg.targetTier,
        },
      },
      { coalesce: keys[keys.length - 1] },
    );
  }
}

export const warmRule: AgentRule<Hot> = {
  name: NAME,
  init: () => new Map(),
  decide(o, ctx) {
    if (o.type === "TurnFinished") remember(o, ctx);
    else if (o.type === "WorkerJoined") warm(o.worker, o.pageSize, "worker joined", ctx);
    else if (o.type === "WorkerCleared" && o.reason === "restart")
      warm(o.worker, pageSizeOf(ctx, o.worker), "worker restarted", ctx);
  },
};
