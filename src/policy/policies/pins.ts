// Prompt-cache markers -> pins. Each breakpoint pins the blocks up to it (its token position is
// the worker's) with the marker's TTL; a hit (a later turn of the session covering a pinned block)
// re-pins it once less than `refreshBelow` of its TTL is left, as Anthropic refreshes on every
// hit; the session's close releases every hold. The pin-budget view caps what is asked of each
// worker (longer TTLs, earlier blocks first); a `partial` ack whose worker refused blocks for its
// budget marks the worker full.
import type { CommandAcked, TurnFinished } from "../../contract/observations.js";
import { sentPart, unpinned } from "../session-view.js";
import type { PolicyTx, PolicyView } from "../tx.js";
import type { PinHold } from "../pin-budget.js";
import { capPrefix } from "../pin-caps.js";
import { type AgentRule, pageSizeOf } from "./policy.js";

const NAME = "cache_markers";

function releaseAll(ctx: PolicyTx, session: string, reason: string, kind?: PinHold["kind"]): void {
  for (const worker of ctx.budget.workersOf(session)) {
    const holds = ctx.budget.holdsOf(worker, session, kind);
    // One unpin per hold: layer j unpins the blocks holding at least j pins.
    for (let layer = 1; ; layer++) {
      const hashes = [...holds].filter(([, l]) => l.length >= layer).map(([h]) => h);
      if (!hashes.length) break;
      ctx.emit(
        NAME,
        {
          worker,
          sessionId: session,
          reason,
          hold: "marker",
          command: { type: "Cache", block_hashes: hashes, pin: false },
        },
        { essential: true },
      );
    }
    for (const [h, l] of holds) for (const p of l) ctx.release(worker, [h], session, p.kind);
  }
}

type Holds = ReturnType<PolicyView["budget"]["holdsOf"]>;

function onTurn(o: TurnFinished, ctx: PolicyTx): void {
  if (!o.sessionId || o.status !== 200 || o.chain.length === 0) return;
  const sid = o.sessionId;
  const markers = o.cacheMarkers ?? null;
  if (markers?.errors.length) {
    ctx.bad("markers", markers.errors.join("; "), sid);
    return;
  }
  const page = pageSizeOf(ctx, o.worker);
  const promptBlocks = o.promptTokens
    ? Math.min(Math.floor(o.promptTokens.length / page), o.chain.length)
    : o.chain.length;
  const holds = ctx.budget.holdsOf(o.worker, sid, "marker");
  const ttl = wantedTtls(o, holds, promptBlocks, page);
  const { groups, fresh } = pinsDue(o, ctx, holds, ttl);
  if (fresh && groups.size === 0)
    ctx.note(NAME, "skip", "pins fresh", { session: sid, worker: o.worker, blocks: fresh });
  for (const [t, hashes] of [...groups].sort((a, b) => b[0] - a[0]))
    pinGroup(o.worker, sid, t, hashes, holds, ctx);
}

/** Desired TTL per prompt block: the longest of the breakpoints covering it and of its own hits. */
function wantedTtls(o: TurnFinished, holds: Holds, promptBlocks: number, page: number): number[] {
  const ttl: number[] = new Array(promptBlocks).fill(0);
  for (const bp of o.cacheMarkers?.breakpoints ?? []) {
    const n = Math.min(Math.floor(bp.tokens / page), promptBlocks);
    for (let i = 0; i < n; i++) ttl[i] = Math.max(ttl[i], bp.ttlSeconds);
  }
  // The hits: blocks this session holds marker pins on keep their TTL.
  for (let i = 0; i < promptBlocks; i++) {
    const l = holds.get(o.chain[i]);
    if (l) for (const p of l) ttl[i] = Math.max(ttl[i], p.ttlSeconds ?? 0);
  }
  return ttl;
}

/** Blocks to (re-)pin grouped by TTL, and how many are pinned fresh enough already. */
function pinsDue(
  o: TurnFinished,
  ctx: PolicyView,
  holds: Holds,
  ttl: number[],
): { groups: Map<number, bigint[]>; fresh: number } {
  const groups = new Map<number, bigint[]>();
  let fresh = 0;
  for (let i = 0; i < ttl.length; i++) {
    if (ttl[i] === 0) continue;
    const l = holds.get(o.chain[i]);
    const left = l
      ? Math.max(
          ...l.map((p) =>
            p.expiresAt === null ? Number.POSITIVE_INFINITY : p.expiresAt - ctx.now,
          ),
        )
      : 0;
    if (
      l &&
      left >= ttl[i] * 1000 * ctx.cfg.pins.refreshBelow &&
      l.some((p) => (p.ttlSeconds ?? 0) >= ttl[i])
    ) {
      fresh++;
      continue;
    }
    const g = groups.get(ttl[i]);
    if (g) g.push(o.chain[i]);
    else groups.set(ttl[i], [o.chain[i]]);
  }
  return { groups, fresh };
}

/** How many of `hashes` (in order) the session's caps leave it: blocks it holds already are free. */
function capFit(ctx: PolicyTx, sid: string, worker: string, hashes: readonly bigint[]): number {
  const s = ctx.sessions.get(sid);
  if (!s) return hashes.length;
  const { fit, cap } = capPrefix(ctx, s, worker, hashes);
  if (fit < hashes.length)
    ctx.note(
      NAME,
      "skip",
      `${cap === "tenant_cap" ? `tenant cap (tenant ${s.tenant})` : "session cap"}: ${hashes.length - fit} of ${hashes.length} blocks over it`,
      { session: sid, worker },
    );
  return fit;
}

/** Pins what the session's caps and the budget admit of one TTL group. */
function pinGroup(
  worker: string,
  sid: string,
  t: number,
  hashes: bigint[],
  holds: Holds,
  ctx: PolicyTx,
): void {
  const capped = capFit(ctx, sid, worker, hashes);
  const fit = ctx.budget.admit(worker, hashes.slice(0, capped));
  if (fit < capped)
    ctx.note(NAME, "skip", `pin budget: ${capped - fit} of ${hashes.length} blocks over it`, {
      session: sid,
      worker,
      used: ctx.budget.used(worker),
    });
  if (fit === 0) return;
  const pin = hashes.slice(0, fit);
  const refresh = pin.every((h) => holds.has(h));
  const sent = ctx.emit(
    NAME,
    {
      worker,
      sessionId: sid,
      hold: "marker",
      reason: `${refresh ? "refresh on hit" : "marker"}: ${pin.length} blocks for ${t}s`,
      command: { type: "Cache", block_hashes: pin, pin: true, ttl_seconds: t },
    },
    {
      coalesce: `${sid}|${t}|${pin[pin.length - 1]}`,
      onAck: (a, ctx) => pinAcked(sid, pin, a, ctx),
    },
  );
  if (sent)
    ctx.hold(worker, pin, {
      session: sid,
      kind: "marker",
      ttlSeconds: t,
      expiresAt: ctx.now + t * 1000,
    });
}

function pinAcked(sid: string, emitted: bigint[], a: CommandAcked, ctx: PolicyTx): void {
  const { sent: pin, cut } = sentPart(emitted, a);
  if (cut.length) {
    ctx.release(a.worker, cut, sid, "marker");
    ctx.note(NAME, "cut", `the gateway sent ${pin.length} of ${emitted.length} blocks`, {
      session: sid,
      worker: a.worker,
    });
  }
  if (a.status === "applied" || a.status === "duplicate" || a.status === "noop") return;
  if (a.status === "partial") {
    const { dropped, refused } = unpinned(pin, a);
    ctx.release(a.worker, dropped, sid, "marker");
    if (refused > 0) ctx.markFull(a.worker);
    ctx.note(
      NAME,
      "partial",
      `${refused > 0 ? "worker budget" : "blocks gone"}: pinned ${pin.length - dropped.length} of ${pin.length}, ${a.detail ?? ""}`,
      { session: sid, worker: a.worker },
    );
    return;
  }
  for (const h of pin) ctx.release(a.worker, [h], sid, "marker");
  ctx.note(NAME, "undo", `pin ${a.status}: ${a.detail ?? ""}`, { session: sid, worker: a.worker });
}

export const pinsRule: AgentRule = {
  name: NAME,
  decide(o, ctx) {
    if (o.type === "TurnFinished") onTurn(o, ctx);
    else if (o.type === "SessionHint" && o.event === "close")
      releaseAll(ctx, o.sessionId, "session closed", "marker");
  },
};

export { releaseAll };
