// The holds a session's record names: every pin, lease and tool offload the gateway asked a worker
// for, each by its own identity, written before the command goes out and removed only when its
// own release is acked. A release claims blocks of named holds (one unpin per hold per block), so
// it never touches another hold, and the worker's pin count of a block is the number of holds the
// records name on it. These functions change a record in place and touch nothing else; plan.ts
// runs them inside the store's compare-and-set update and returns what they did as values.
import type { HoldKind, PolicyCommand } from "../../../contract/policy.js";
import { type Command, uuidv7 } from "../../../protocol/index.js";
import type { HoldRecord, ReleaseRecord, SessionRecord } from "./record.js";

export type { HoldRecord };

/** What the ledger knows when it writes: who it is, the time, and each worker's process. */
export interface HoldEnv {
  replica: string;
  now: number;
  nextId: () => string;
  incarnation: (worker: string) => string | null;
  /** A hold dropped without a release (expired, or its worker restarted), for the counters. */
  dropped?: (h: HoldRecord, why: string) => void;
}

/** Part of a hold a command releases (all of it for a lease or an offload). */
export interface Claim {
  hold: string;
  blocks: string[];
}

export type HoldEffect =
  | { take: string }
  | { release: Claim[]; type: string; id?: string }
  | { renew: string; ttlSeconds: number }
  | null;

/**
 * How long after its first send a release may go out again under its id: well inside the worker's
 * dedupe window (dedupe_window_s), past which the worker could apply it a second time.
 */
const RESEND_WITHIN_MS = 300_000;

/** An ack status, or failed (no answer) / dropped (never sent), with what a Cache ack says. */
export interface HoldResult {
  status: string;
  affected?: number;
  missing?: readonly bigint[];
  skipped?: number;
  epoch?: number | null;
}

export const PIN_KINDS: ReadonlySet<HoldKind> = new Set(["marker", "inflight", "tool"]);

export function holdsOf(r: SessionRecord): HoldRecord[] {
  r.holds ??= [];
  return r.holds;
}

export function releasesOf(r: SessionRecord): ReleaseRecord[] {
  r.releases ??= [];
  return r.releases;
}

/**
 * A record an older gateway wrote names its pins and leases without identities: each becomes a
 * hold of its own (owned by no live replica), so close releases them like any other.
 */
export function adoptLegacyHolds(r: SessionRecord, env: HoldEnv): boolean {
  if (r.holds !== undefined) return false;
  const hs: HoldRecord[] = [];
  const base = (worker: string, blocks: string[], ttl: number | null, at: number): HoldRecord => ({
    ...newHold(
      { ...env, now: at },
      { worker, command: { type: "Inspect" }, reason: "" },
      "marker",
      [],
      ttl,
    ),
    blocks: [...blocks],
    incarnation: null,
    replica: "legacy",
    state: "held",
  });
  for (const p of r.pins ?? []) hs.push(base(p.worker, p.blockHashes, p.ttlSeconds, p.atMs));
  for (const l of r.leases ?? [])
    hs.push({
      ...base(l.worker, l.blockHashes, l.ttlSeconds, l.atMs),
      kind: "lease",
      leaseId: l.leaseId,
    });
  r.holds = hs;
  return true;
}

/** Keeps the older fields (pins, leases, tool) equal to what the holds name. */
export function syncLegacyFields(r: SessionRecord): void {
  Object.assign(r, storedHolds(r));
}

/** Drops holds past their TTL (the worker dropped them too) and those on a worker's earlier process. */
export function pruneHolds(r: SessionRecord, env: HoldEnv): void {
  const keep: HoldRecord[] = [];
  for (const h of holdsOf(r)) {
    const cur = env.incarnation(h.worker);
    let why: string | null = null;
    if (h.expiresMs !== null && h.expiresMs <= env.now) why = "expired";
    else if (cur !== null && h.incarnation !== null && cur !== h.incarnation)
      why = "worker restarted";
    if (why === null) keep.push(h);
    else env.dropped?.(h, why);
  }
  r.holds = keep;
  const ids = new Set(keep.map((h) => h.id));
  if (r.releases) r.releases = r.releases.filter((e) => e.claims.some((c) => ids.has(c.hold)));
}

function newHold(
  env: HoldEnv,
  pc: PolicyCommand,
  kind: HoldKind,
  blocks: readonly bigint[],
  ttl: number | null,
): HoldRecord {
  return {
    id: env.nextId(),
    kind,
    worker: pc.worker,
    incarnation: env.incarnation(pc.worker),
    blocks: blocks.map(String),
    releasing: [],
    leaseId: null,
    toolSession: null,
    epoch: null,
    replica: env.replica,
    ttlSeconds: ttl,
    expiresMs: ttl === null ? null : env.now + ttl * 1000,
    atMs: env.now,
    state: "sending",
  };
}

/**
 * One unpin per block, each from one hold of the session on that worker still holding it (the
 * policy's own kind first, then the hold covering most of the release). Returns the claims.
 */
function claimPins(
  r: SessionRecord,
  env: HoldEnv,
  worker: string,
  hashes: readonly string[],
  prefer: HoldKind | undefined,
): Claim[] {
  const want = new Set(hashes);
  const cands = holdsOf(r).filter((h) => h.worker === worker && PIN_KINDS.has(h.kind));
  const cover = (h: HoldRecord) => h.blocks.filter((b) => want.has(b)).length;
  cands.sort(
    (a, b) => Number(b.kind === prefer) - Number(a.kind === prefer) || cover(b) - cover(a),
  );
  const claims = new Map<string, Claim>();
  for (const b of hashes) {
    const h = cands.find((c) => c.blocks.includes(b));
    if (!h) continue;
    h.blocks.splice(h.blocks.indexOf(b), 1);
    h.releasing.push(b);
    claimedBy(h, env);
    const c = claims.get(h.id) ?? { hold: h.id, blocks: [] };
    c.blocks.push(b);
    claims.set(h.id, c);
  }
  return [...claims.values()];
}

/** Moves a whole hold (lease, offload) to releasing; null when it is gone or released already. */
function claimedBy(h: HoldRecord, env: HoldEnv): void {
  h.releasingBy = env.replica;
  h.releasingAt = env.now;
}

function claimWhole(h: HoldRecord | undefined, env: HoldEnv): Claim | null {
  if (!h || (h.blocks.length === 0 && h.releasing.length > 0)) return null;
  claimedBy(h, env);
  h.releasing.push(...h.blocks);
  h.blocks = [];
  if (h.releasing.length === 0) h.releasing.push("*");
  return { hold: h.id, blocks: [...h.releasing] };
}

/** Names a release in the record before it is sent, under the idempotency id it always goes out with. */
function recordRelease(
  r: SessionRecord,
  env: HoldEnv,
  pc: PolicyCommand,
  claims: Claim[],
): { pc: PolicyCommand; effect: HoldEffect } {
  const c = pc.command;
  // The policy's own release goes out under the policy's id (its ack finds its rule by it).
  const id = pc.id ?? uuidv7();
  const type = c.type as ReleaseRecord["type"];
  releasesOf(r).push({
    id,
    worker: pc.worker,
    type,
    blocks: c.type === "Cache" ? c.block_hashes.map(String) : [],
    leaseId: c.type === "RevokeLease" ? c.lease_id : null,
    ...(c.type === "RevokeLease" && c.purge === false ? { keepBlocks: true as const } : {}),
    toolSession: c.type === "ToolEnd" ? c.session_id : null,
    epoch: c.type === "ToolEnd" ? Number(c.epoch) : null,
    claims: claims.map((x) => ({ hold: x.hold, blocks: [...x.blocks] })),
    by: env.replica,
    atMs: env.now,
    doubt: false,
    reason: pc.reason,
  });
  return { pc: { ...pc, id }, effect: { release: claims, type, id } };
}

/** A recorded release as it goes out again: the same command under the same id. */
function resent(
  r: SessionRecord,
  e: ReleaseRecord,
  env: HoldEnv,
): { pc: PolicyCommand; effect: HoldEffect } {
  let command: Command;
  if (e.type === "Cache")
    command = { type: "Cache", block_hashes: e.blocks.map((b) => BigInt(b)), pin: false };
  else if (e.type === "RevokeLease")
    command = e.keepBlocks
      ? { type: "RevokeLease", lease_id: e.leaseId as string, purge: false }
      : { type: "RevokeLease", lease_id: e.leaseId as string };
  else command = { type: "ToolEnd", session_id: e.toolSession as string, epoch: e.epoch as number };
  e.by = env.replica;
  for (const c of e.claims) for (const h of holdsOf(r)) if (h.id === c.hold) claimedBy(h, env);
  return {
    pc: {
      worker: e.worker,
      sessionId: r.id,
      reason: `${e.reason} (sent again under its id)`,
      id: e.id,
      command,
    },
    effect: { release: e.claims, type: e.type, id: e.id },
  };
}

/**
 * The recorded releases of picked holds that `resend` sends again. An unpin past the worker's
 * dedupe window, or one whose holds are not all there any more, is not: sent twice it could take
 * another session's pin on a shared block. Its blocks leave the record unreleased (their TTL ends
 * them on the worker), counted as dropped.
 */
function resendReleases(
  r: SessionRecord,
  env: HoldEnv,
  pick: (h: HoldRecord) => boolean,
  resend: (e: ReleaseRecord) => boolean,
): { pc: PolicyCommand; effect: HoldEffect }[] {
  const out: { pc: PolicyCommand; effect: HoldEffect }[] = [];
  const keep: ReleaseRecord[] = [];
  for (const e of releasesOf(r)) {
    const holds = e.claims.map((c) => holdsOf(r).find((h) => h.id === c.hold));
    if (!holds.some((h) => h !== undefined && pick(h)) || !resend(e)) keep.push(e);
    else if (
      e.type !== "Cache" ||
      (holds.every((h) => h !== undefined) && env.now - e.atMs < RESEND_WITHIN_MS)
    ) {
      keep.push(e);
      out.push(resent(r, e, env));
    } else forgetRelease(r, e, env);
  }
  r.releases = keep;
  return out;
}

function forgetRelease(r: SessionRecord, e: ReleaseRecord, env: HoldEnv): void {
  for (const c of e.claims) {
    const h = holdsOf(r).find((x) => x.id === c.hold);
    if (!h) continue;
    h.releasing = h.releasing.filter((b) => !c.blocks.includes(b));
    env.dropped?.(h, "release outcome unknown");
  }
  r.holds = holdsOf(r).filter((h) => h.blocks.length > 0 || h.releasing.length > 0);
}

/**
 * Before a command is sent: records the hold it takes, or claims what it releases. Returns the
 * command to send (a release narrowed to the blocks some hold still names; null: nothing left to
 * release, it is not sent) and its effect, which `settleHold` applies with the ack.
 */
export function prepareHold(
  r: SessionRecord,
  pc: PolicyCommand,
  env: HoldEnv,
): { pc: PolicyCommand | null; effect: HoldEffect } {
  pruneHolds(r, env);
  const c = pc.command;
  const hs = holdsOf(r);
  switch (c.type) {
    case "Cache": {
      if (c.pin) {
        const h = newHold(env, pc, pc.hold ?? "marker", c.block_hashes, c.ttl_seconds ?? null);
        hs.push(h);
        return { pc, effect: { take: h.id } };
      }
      const claims = claimPins(r, env, pc.worker, c.block_hashes.map(String), pc.hold);
      const claimed = new Set(claims.flatMap((x) => x.blocks));
      if (!claimed.size) return { pc: null, effect: null };
      const narrowed = c.block_hashes.filter((b) => claimed.delete(String(b)));
      return recordRelease(r, env, { ...pc, command: { ...c, block_hashes: narrowed } }, claims);
    }
    case "Pause":
      return { pc, effect: { take: takeLease(r, pc, c, env).id } };
    case "RenewLease":
      return { pc, effect: { renew: c.lease_id, ttlSeconds: c.new_ttl_seconds } };
    case "RevokeLease": {
      const claim = claimWhole(
        hs.find((h) => h.kind === "lease" && h.leaseId === c.lease_id && h.worker === pc.worker),
        env,
      );
      return claim ? recordRelease(r, env, pc, [claim]) : { pc, effect: null };
    }
    case "ToolStart":
      return { pc, effect: { take: takeOffload(r, pc, c, env).id } };
    case "ToolEnd": {
      const claims = hs
        .filter(
          (h) => h.kind === "offload" && h.toolSession === c.session_id && h.worker === pc.worker,
        )
        .map((h) => claimWhole(h, env));
      const live = claims.filter((x): x is Claim => x !== null);
      return live.length ? recordRelease(r, env, pc, live) : { pc, effect: null };
    }
    default:
      return { pc, effect: null };
  }
}

/** A Pause's lease; one under a lease id the worker already holds extends that lease (its blocks
 * joined, a new expiry), so the record keeps one hold per lease id. */
function takeLease(
  r: SessionRecord,
  pc: PolicyCommand,
  c: Extract<Command, { type: "Pause" }>,
  env: HoldEnv,
): HoldRecord {
  const hs = holdsOf(r);
  const h = newHold(env, pc, "lease", c.block_hashes, c.ttl_seconds);
  h.leaseId = c.lease_id;
  const same = (x: HoldRecord) =>
    x.kind === "lease" && x.leaseId === c.lease_id && x.worker === pc.worker;
  h.blocks = [...new Set([...hs.filter(same).flatMap((x) => x.blocks), ...h.blocks])];
  r.holds = hs.filter((x) => !same(x));
  r.holds.push(h);
  return h;
}

/** A ToolStart's offload; the worker ends an earlier offload of the session itself when a new one arrives. */
function takeOffload(
  r: SessionRecord,
  pc: PolicyCommand,
  c: Extract<Command, { type: "ToolStart" }>,
  env: HoldEnv,
): HoldRecord {
  const h = newHold(env, pc, "offload", c.block_hashes, null);
  h.toolSession = c.session_id;
  r.holds = holdsOf(r).filter(
    (x) => !(x.kind === "offload" && x.toolSession === c.session_id && x.worker === pc.worker),
  );
  r.holds.push(h);
  return h;
}

/** The blocks of a pin the worker did not pin: those it lacked (missing), then the refused tail. */
function notPinned(blocks: readonly string[], res: HoldResult): Set<string> {
  if (res.missing === undefined && res.skipped === undefined)
    return new Set(blocks.slice(res.affected ?? 0));
  const missing = new Set((res.missing ?? []).map(String));
  const found = blocks.filter((b) => !missing.has(b));
  const refused = Math.min(res.skipped ?? 0, found.length);
  return new Set([...missing, ...found.slice(found.length - refused)]);
}

function settleTake(r: SessionRecord, h: HoldRecord, res: HoldResult): void {
  const s = res.status;
  if (s === "rejected" || s === "dropped" || (s === "noop" && h.kind !== "lease")) {
    r.holds = holdsOf(r).filter((x) => x !== h);
    return;
  }
  if (s === "error" || s === "failed") {
    h.state = "doubt";
    return;
  }
  h.state = "held";
  if (h.kind === "offload" && res.epoch != null) h.epoch = Number(res.epoch);
  if (s === "partial" && PIN_KINDS.has(h.kind)) {
    const gone = notPinned(h.blocks, res);
    h.blocks = h.blocks.filter((b) => !gone.has(b));
    if (!h.blocks.length && !h.releasing.length) r.holds = holdsOf(r).filter((x) => x !== h);
  }
}

/**
 * An acked release ends its claims; an unpin the worker rejected (it unpinned nothing), or one
 * never sent, gives them back (close sends them again as a new release). One whose outcome is
 * unknown (an error, no ack, or a repeat not sent) stays named with its id, in doubt: close sends
 * it again under that id. A rejected RevokeLease or ToolEnd means the worker no longer knows the
 * lease or offload: it is gone.
 */
function settleRelease(
  r: SessionRecord,
  claims: readonly Claim[],
  res: HoldResult,
  type: string,
  id: string | undefined,
): void {
  const s = res.status;
  const e = id === undefined ? undefined : releasesOf(r).find((x) => x.id === id);
  const unknown = s === "error" || s === "failed" || (s === "dropped" && e?.doubt === true);
  if (unknown && e) {
    e.doubt = true;
    for (const c of claims) for (const h of holdsOf(r)) if (h.id === c.hold) h.state = "doubt";
    return;
  }
  if (e) r.releases = releasesOf(r).filter((x) => x !== e);
  const done = !unknown && s !== "dropped" && !(s === "rejected" && type === "Cache");
  for (const c of claims) {
    const h = holdsOf(r).find((x) => x.id === c.hold);
    if (!h) continue;
    for (const b of c.blocks) {
      const i = h.releasing.indexOf(b);
      if (i < 0) continue;
      h.releasing.splice(i, 1);
      if (!done && b !== "*") h.blocks.push(b);
    }
    if (!done) h.state = "doubt";
    if (!h.blocks.length && !h.releasing.length) r.holds = holdsOf(r).filter((x) => x !== h);
  }
}

/** Applies a command's outcome to the holds its `prepareHold` effect names. */
export function settleHold(
  r: SessionRecord,
  effect: HoldEffect,
  res: HoldResult,
  now: number,
): void {
  if (!effect) return;
  if ("take" in effect) {
    const h = holdsOf(r).find((x) => x.id === effect.take);
    if (h) settleTake(r, h, res);
  } else if ("release" in effect) settleRelease(r, effect.release, res, effect.type, effect.id);
  else {
    const l = holdsOf(r).filter((x) => x.kind === "lease" && x.leaseId === effect.renew);
    if (res.status === "rejected") r.holds = holdsOf(r).filter((x) => !l.includes(x));
    else if (res.status === "applied" || res.status === "duplicate") {
      for (const h of l) {
        h.ttlSeconds = effect.ttlSeconds;
        h.expiresMs = now + effect.ttlSeconds * 1000;
      }
    }
  }
}

/** A release of everything `pick` selects that is not being released already, one command per layer. */
export function releaseCommands(
  r: SessionRecord,
  env: HoldEnv,
  pick: (h: HoldRecord) => boolean,
  reason: string,
  resend: (e: ReleaseRecord) => boolean = () => false,
): { pc: PolicyCommand; effect: HoldEffect }[] {
  pruneHolds(r, env);
  const out = resendReleases(r, env, pick, resend);
  const hs = holdsOf(r).filter(pick);
  for (const worker of new Set(hs.filter((h) => PIN_KINDS.has(h.kind)).map((h) => h.worker))) {
    const mine = hs.filter((h) => h.worker === worker && PIN_KINDS.has(h.kind));
    out.push(...unpinLayers(r, env, worker, mine, reason));
  }
  for (const h of hs) {
    const command: Command | null =
      h.kind === "lease" && h.leaseId
        ? { type: "RevokeLease", lease_id: h.leaseId }
        : h.kind === "offload" && h.toolSession && h.epoch !== null
          ? { type: "ToolEnd", session_id: h.toolSession, epoch: h.epoch }
          : null;
    const claim = command && claimWhole(h, env);
    if (command && claim)
      out.push(
        recordRelease(r, env, { worker: h.worker, sessionId: r.id, reason, command }, [claim]),
      );
  }
  return out;
}

/** The unpins of a worker's pin holds: layer j takes the j-th hold of every block held j times
 * or more, so each unpin releases one pin of each hold it names. */
function unpinLayers(
  r: SessionRecord,
  env: HoldEnv,
  worker: string,
  mine: HoldRecord[],
  reason: string,
): { pc: PolicyCommand; effect: HoldEffect }[] {
  const out: { pc: PolicyCommand; effect: HoldEffect }[] = [];
  for (;;) {
    const claims = new Map<string, Claim>();
    const seen = new Set<string>();
    for (const h of mine) {
      for (const b of h.blocks) {
        if (seen.has(b)) continue;
        seen.add(b);
        const c = claims.get(h.id) ?? { hold: h.id, blocks: [] };
        c.blocks.push(b);
        claims.set(h.id, c);
      }
    }
    if (!seen.size) return out;
    for (const c of claims.values()) {
      const h = mine.find((x) => x.id === c.hold) as HoldRecord;
      h.blocks = h.blocks.filter((b) => !c.blocks.includes(b));
      h.releasing.push(...c.blocks);
      claimedBy(h, env);
    }
    const command: Command = {
      type: "Cache",
      block_hashes: [...seen].map((b) => BigInt(b)),
      pin: false,
    };
    out.push(
      recordRelease(r, env, { worker, sessionId: r.id, reason, command }, [...claims.values()]),
    );
  }
}

/** The pins, leases and tool offload the record names, as the policy reads them at a turn's start. */
export function storedHolds(r: SessionRecord): Pick<SessionRecord, "pins" | "leases" | "tool"> {
  const hs = (r.holds ?? []).filter((h) => h.blocks.length > 0 || h.state === "sending");
  const at = (h: HoldRecord) => ({
    worker: h.worker,
    incarnation: h.incarnation,
    blockHashes: h.blocks,
    ttlSeconds: h.ttlSeconds,
    atMs:
      h.expiresMs !== null && h.ttlSeconds !== null ? h.expiresMs - h.ttlSeconds * 1000 : h.atMs,
  });
  const off = hs.find((h) => h.kind === "offload");
  return {
    pins: hs.filter((h) => PIN_KINDS.has(h.kind)).map((h) => ({ kind: h.kind, ...at(h) })),
    leases: hs
      .filter((h) => h.kind === "lease" && h.leaseId)
      .map((h) => ({ ...at(h), leaseId: h.leaseId as string })),
    tool: off ? { worker: off.worker, epoch: off.epoch, startedMs: off.atMs } : null,
  };
}

/** Pins per block the records' acked holds name on a worker (those in flight either way are left out). */
export function namedPins(records: Iterable<SessionRecord>, worker: string): Map<bigint, number> {
  const out = new Map<bigint, number>();
  for (const r of records) {
    for (const h of r.holds ?? []) {
      if (h.worker !== worker || !PIN_KINDS.has(h.kind) || h.state !== "held") continue;
      for (const b of h.blocks) out.set(BigInt(b), (out.get(BigInt(b)) ?? 0) + 1);
    }
  }
  return out;
}

/** The stored state without holds on a worker's earlier process (that process took them along). */
export function currentStored<T extends { worker: string; incarnation?: string | null }>(
  list: readonly T[],
  incarnation: (worker: string) => string | null,
): T[] {
  return list.filter((x) => {
    const cur = incarnation(x.worker);
    return cur === null || x.incarnation == null || x.incarnation === cur;
  });
}

/** Whether the record still names a hold, or a release not settled yet. */
export function namesHolds(r: SessionRecord): boolean {
  if (r.holds === undefined) return r.pins.length > 0 || r.leases.length > 0 || r.tool !== null;
  return (
    r.holds.some((h) => h.blocks.length > 0 || h.releasing.length > 0) ||
    (r.releases ?? []).length > 0
  );
}
