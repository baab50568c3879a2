// The gateway's own view of every worker's pin budget: which blocks it asked each worker to pin,
// for whom, until when. A block counts once per worker however many holds it has (the worker's
// pin_count is reference-counted; its budget counts pinned blocks). Holds expire with their TTL,
// as the worker's do, so the view frees budget without waiting for any message. It also tells
// whether each pin paid off: a pinned block served from a worker's cache before its last hold
// went was hit; one that was never is wasted (memory held for nothing).
import { ExpiryHeap } from "./expiry-heap.js";

export interface PinHold {
  session: string;
  /** The session whose caps a hold of another owner counts toward (a request's own hold: its session). */
  of?: string | null;
  /** Why it was pinned: "marker" (prompt-cache breakpoint), "tool" (kept through a tool call),
   * "inflight" (a routed request's cached prefix, held until it is served) or "lease" (an idle
   * session paused on host). The worker counts them all against one budget. */
  kind: "marker" | "tool" | "inflight" | "lease";
  ttlSeconds: number | null;
  expiresAt: number | null;
}

/** What became of a pinned block once its last hold went: served from cache meanwhile, or not. */
export type PinOutcome = "hit" | "wasted";

/** How long a hold taken or released here may be missing from, or still named in, what the worker
 * and the session records say (ms): the command and the record's write are still on their way. */
export const SETTLE_MS = 5000;

/** What comes due in the expiry heap: one hold() call's blocks, or one lost hold's memory. */
type Due =
  | { worker: string; hashes: readonly bigint[]; session?: undefined }
  | { worker: string; session: string; hash: bigint };

export class PinBudget {
  private readonly byWorker = new Map<string, Map<bigint, PinHold[]>>();
  /** Workers that answered `partial` (budget exhausted): treated as full until a hold goes. */
  private readonly full = new Set<string>();
  /** Pinned blocks served from a worker's cache since they were pinned. */
  private readonly hit = new Map<string, Set<bigint>>();
  /**
   * Holds gone from the view that a session record may still name, by worker, session and block,
   * with until when: those the worker was found not to have (its Inspect) until the hold would
   * have expired (records drop holds on release or expiry only), and those released here for
   * SETTLE_MS (a record read before the release was written still names them). Adopting them from
   * a record would count blocks the worker does not pin.
   */
  private readonly lostHolds = new Map<string, Map<string, Map<bigint, number>>>();
  /** The clock of the last expire() (ms). */
  private now = 0;
  /** No hold or lost hold expires before this (ms): expire() scans nothing until then. A bound,
   * not the exact minimum (a release leaves it as it was): a scan too early only finds nothing. */
  private nextExpiry = Number.POSITIVE_INFINITY;
  /**
   * A draft's per-worker maps start as its original's, shared: each is copied the first time the
   * draft changes it (a transaction's draft reads the whole fleet's view and changes a few
   * workers'). Null on an original, which owns all of its maps.
   */
  private copied: {
    holds: Set<string>;
    hits: Set<string>;
    lost: Set<string>;
    /** Per worker whose map it copied: the blocks whose hold lists are its own too (a copied
     * map shares its original's lists until the draft changes one). */
    lists: Map<string, Set<bigint>>;
  } | null = null;
  /**
   * When holds and lost holds come due, so that expire() visits those alone: every hold taken and
   * every hold remembered as lost is in it at its time (entries of holds released since are found
   * gone). The original view's only: a draft is never expired (a transaction reads its draft,
   * then applies its steps to the original), and scans as before if it were.
   */
  private due: ExpiryHeap<Due> | null = new ExpiryHeap();

  constructor(
    private readonly perWorker: number,
    private readonly global: number | null,
    /** Called once per pinned block as its last hold goes, with that hold's kind. */
    private readonly onSettled: (kind: PinHold["kind"], outcome: PinOutcome) => void = () =>
      undefined,
  ) {}

  /**
   * A copy that settles silently (a transaction's draft: what it settles counts once applied).
   * It shares this view's per-worker maps until it changes one, so this view must not change
   * while the draft is in use (a transaction builds its draft, then applies its steps here).
   */
  clone(): PinBudget {
    const c = new PinBudget(this.perWorker, this.global);
    for (const [w, m] of this.byWorker) c.byWorker.set(w, m);
    for (const w of this.full) c.full.add(w);
    for (const [w, hs] of this.hit) c.hit.set(w, hs);
    for (const [w, bySession] of this.lostHolds) c.lostHolds.set(w, bySession);
    c.now = this.now;
    c.nextExpiry = this.nextExpiry;
    c.copied = { holds: new Set(), hits: new Set(), lost: new Set(), lists: new Map() };
    c.due = null;
    return c;
  }

  /** `worker`'s holds, this view's own to change (a draft copies its original's first). */
  private ownHolds(worker: string): Map<bigint, PinHold[]> | undefined {
    const m = this.byWorker.get(worker);
    if (!m || !this.copied || this.copied.holds.has(worker)) return m;
    const own = new Map(m);
    this.byWorker.set(worker, own);
    this.copied.holds.add(worker);
    this.copied.lists.set(worker, new Set());
    return own;
  }

  /** The hold list of `h` in `worker`'s own map `m`, this view's own to change in place. */
  private ownList(worker: string, m: Map<bigint, PinHold[]>, h: bigint): PinHold[] | undefined {
    const l = m.get(h);
    const mine = this.copied?.lists.get(worker);
    if (!l || !mine || mine.has(h)) return l;
    const own = l.slice();
    m.set(h, own);
    mine.add(h);
    return own;
  }

  private ownHits(worker: string): Set<bigint> | undefined {
    const hs = this.hit.get(worker);
    if (!hs || !this.copied || this.copied.hits.has(worker)) return hs;
    const own = new Set(hs);
    this.hit.set(worker, own);
    this.copied.hits.add(worker);
    return own;
  }

  private ownLost(worker: string): Map<string, Map<bigint, number>> | undefined {
    const bySession = this.lostHolds.get(worker);
    if (!bySession || !this.copied || this.copied.lost.has(worker)) return bySession;
    const own = new Map([...bySession].map(([s, m]) => [s, new Map(m)]));
    this.lostHolds.set(worker, own);
    this.copied.lost.add(worker);
    return own;
  }

  private settle(worker: string, hash: bigint, last: PinHold): void {
    const hits = this.ownHits(worker);
    this.onSettled(last.kind, hits?.delete(hash) ? "hit" : "wasted");
  }

  /** `cached` blocks were served from `worker`'s cache: the pinned ones among them paid off. */
  served(worker: string, cached: readonly bigint[]): void {
    const m = this.byWorker.get(worker);
    if (!m) return;
    for (const h of cached) {
      if (!m.has(h)) continue;
      let hits = this.ownHits(worker);
      if (!hits) {
        hits = new Set();
        this.hit.set(worker, hits);
        this.copied?.hits.add(worker);
      }
      hits.add(h);
    }
  }

  /** Blocks pinned now, by the kind of their newest hold and whether they were hit yet. */
  open(): { kind: PinHold["kind"]; outcome: PinOutcome; blocks: number }[] {
    const n = new Map<string, number>();
    for (const [w, m] of this.byWorker) {
      const hits = this.hit.get(w);
      for (const [h, l] of m) {
        const k = `${l[l.length - 1].kind}/${hits?.has(h) ? "hit" : "wasted"}`;
        n.set(k, (n.get(k) ?? 0) + 1);
      }
    }
    return [...n].map(([k, blocks]) => {
      const [kind, outcome] = k.split("/") as [PinHold["kind"], PinOutcome];
      return { kind, outcome, blocks };
    });
  }

  private blocks(worker: string): Map<bigint, PinHold[]> {
    let m = this.ownHolds(worker);
    if (!m) {
      m = new Map();
      this.byWorker.set(worker, m);
      this.copied?.holds.add(worker);
    }
    return m;
  }

  private remember(worker: string, session: string, hash: bigint, until: number): void {
    let bySession = this.ownLost(worker);
    if (!bySession) {
      bySession = new Map();
      this.lostHolds.set(worker, bySession);
      this.copied?.lost.add(worker);
    }
    let m = bySession.get(session);
    if (!m) {
      m = new Map();
      bySession.set(session, m);
    }
    m.set(hash, Math.max(m.get(hash) ?? 0, until));
    this.nextExpiry = Math.min(this.nextExpiry, until);
    if (until !== Number.POSITIVE_INFINITY) this.due?.push(until, { worker, session, hash });
  }

  /** Drops one hold of `session` on `hash` that the worker does not have, and remembers it as lost. */
  lose(worker: string, hash: bigint, session: string, kind: PinHold["kind"]): void {
    const l = this.byWorker.get(worker)?.get(hash);
    const p = l?.find((x) => x.session === session && x.kind === kind);
    if (!p) return;
    this.release(worker, [hash], session, kind);
    this.remember(worker, session, hash, p.expiresAt ?? Number.POSITIVE_INFINITY);
  }

  /** Whether this session's hold on `hash` left the view lately or was found gone: a record naming it is behind. */
  wasLost(worker: string, session: string, hash: bigint): boolean {
    return this.lostHolds.get(worker)?.get(session)?.has(hash) ?? false;
  }

  /** Forgets the lost holds of a session on a worker except those on `named` (its record names no others). */
  keepLostOnly(worker: string, session: string, named: ReadonlySet<bigint>): void {
    if (!this.lostHolds.get(worker)?.has(session)) return;
    const bySession = this.ownLost(worker) as Map<string, Map<bigint, number>>;
    const m = bySession.get(session) as Map<bigint, number>;
    for (const h of m.keys()) if (!named.has(h)) m.delete(h);
    if (!m.size) bySession.delete(session);
  }

  /** Drops holds whose TTL has run out. */
  expire(now: number): void {
    this.now = now;
    if (now < this.nextExpiry) return;
    const due = this.due;
    if (!due) return this.expireAll(now);
    while (due.top() <= now) {
      const d = due.pop() as Due;
      if (d.session === undefined) for (const h of d.hashes) this.expireHold(d.worker, h, now);
      else this.expireLost(d.worker, d.session, d.hash, now);
    }
    this.nextExpiry = due.top();
  }

  /** One block's holds on `worker` whose TTL has run out go (as expireOn drops them). */
  private expireHold(worker: string, h: bigint, now: number): void {
    const m = this.ownHolds(worker);
    const holds = m?.get(h);
    if (m && holds) this.dropExpired(worker, m, h, holds, now);
  }

  /** Drops a block's holds on `worker` whose TTL has run out; returns those left. */
  private dropExpired(
    worker: string,
    m: Map<bigint, PinHold[]>,
    h: bigint,
    holds: PinHold[],
    now: number,
  ): PinHold[] {
    const live = holds.filter((x) => x.expiresAt === null || x.expiresAt > now);
    if (live.length === holds.length) return live;
    if (live.length) m.set(h, live);
    else {
      m.delete(h);
      this.full.delete(worker);
      this.settle(worker, h, holds[holds.length - 1]);
    }
    return live;
  }

  /** A lost hold's memory goes once its time has come (as expireAll drops it). */
  private expireLost(worker: string, session: string, h: bigint, now: number): void {
    if (!this.lostHolds.get(worker)?.get(session)?.has(h)) return;
    const bySession = this.ownLost(worker) as Map<string, Map<bigint, number>>;
    const m = bySession.get(session) as Map<bigint, number>;
    if ((m.get(h) as number) > now) return;
    m.delete(h);
    if (!m.size) bySession.delete(session);
  }

  /** Every hold and lost hold scanned: what a view without an expiry heap does. */
  private expireAll(now: number): void {
    let next = Number.POSITIVE_INFINITY;
    for (const w of [...this.lostHolds.keys()]) {
      const bySession = this.ownLost(w) as Map<string, Map<bigint, number>>;
      for (const [session, m] of bySession) {
        for (const [h, until] of m) {
          if (until <= now) m.delete(h);
          else next = Math.min(next, until);
        }
        if (!m.size) bySession.delete(session);
      }
    }
    for (const w of [...this.byWorker.keys()]) next = Math.min(next, this.expireOn(w, now));
    this.nextExpiry = next;
  }

  /** Drops `worker`'s holds whose TTL has run out; returns the earliest expiry left there. */
  private expireOn(worker: string, now: number): number {
    let next = Number.POSITIVE_INFINITY;
    const m = this.ownHolds(worker) as Map<bigint, PinHold[]>;
    for (const [h, holds] of m)
      for (const x of this.dropExpired(worker, m, h, holds, now))
        if (x.expiresAt !== null) next = Math.min(next, x.expiresAt);
    return next;
  }

  used(worker: string): number {
    return this.byWorker.get(worker)?.size ?? 0;
  }

  usedGlobal(): number {
    let n = 0;
    for (const m of this.byWorker.values()) n += m.size;
    return n;
  }

  /** Blocks of `worker` held for this kind only (counted once however many holds of it). */
  usedBy(worker: string, kind: PinHold["kind"]): number {
    let n = 0;
    for (const l of this.byWorker.get(worker)?.values() ?? [])
      if (l.some((p) => p.kind === kind)) n++;
    return n;
  }

  /**
   * How many of `hashes` (in order) may be pinned on `worker` now: blocks already pinned there are
   * free. `share` caps what one kind may hold of the per-worker budget (default: all of it).
   */
  admit(
    worker: string,
    hashes: readonly bigint[],
    limit?: { kind: PinHold["kind"]; share: number },
  ): number {
    const m = this.byWorker.get(worker);
    let room = this.full.has(worker) ? 0 : this.perWorker - this.used(worker);
    if (limit)
      room = Math.min(
        room,
        Math.floor(this.perWorker * limit.share) - this.usedBy(worker, limit.kind),
      );
    let groom = this.global === null ? Number.POSITIVE_INFINITY : this.global - this.usedGlobal();
    for (let i = 0; i < hashes.length; i++) {
      if (m?.has(hashes[i])) continue;
      if (room <= 0 || groom <= 0) return i;
      room--;
      groom--;
    }
    return hashes.length;
  }

  hold(worker: string, hashes: readonly bigint[], h: PinHold): void {
    const m = this.blocks(worker);
    const mine = this.copied?.lists.get(worker);
    for (const x of hashes) {
      const l = this.ownList(worker, m, x);
      if (l) l.push({ ...h });
      else {
        m.set(x, [{ ...h }]);
        mine?.add(x);
      }
    }
    if (h.expiresAt !== null && hashes.length) {
      this.nextExpiry = Math.min(this.nextExpiry, h.expiresAt);
      this.due?.push(h.expiresAt, { worker, hashes: hashes.slice() });
    }
  }

  /** Removes one hold of `session` (of that kind) per block; returns the hashes that had one. */
  release(
    worker: string,
    hashes: readonly bigint[],
    session: string,
    kind?: PinHold["kind"],
  ): bigint[] {
    const m = this.ownHolds(worker);
    if (!m) return [];
    const out: bigint[] = [];
    for (const x of hashes) {
      const shared = m.get(x);
      const i = shared
        ? shared.findIndex((p) => p.session === session && (!kind || p.kind === kind))
        : -1;
      if (!shared || i < 0) continue;
      const l = this.ownList(worker, m, x) as PinHold[];
      const [gone] = l.splice(i, 1);
      this.remember(worker, session, x, this.now + SETTLE_MS);
      if (l.length === 0) {
        m.delete(x);
        this.settle(worker, x, gone);
      }
      out.push(x);
      this.full.delete(worker);
    }
    return out;
  }

  /** Live holds of a session on a worker, by block. */
  holdsOf(worker: string, session: string, kind?: PinHold["kind"]): Map<bigint, PinHold[]> {
    const out = new Map<bigint, PinHold[]>();
    for (const [h, l] of this.byWorker.get(worker) ?? []) {
      const mine = l.filter((p) => p.session === session && (!kind || p.kind === kind));
      if (mine.length) out.set(h, mine);
    }
    return out;
  }

  /** Distinct blocks, over every worker, that a hold of `session` or one held for it (`of`) pins. */
  heldFor(session: string): number {
    let n = 0;
    for (const m of this.byWorker.values())
      for (const l of m.values()) if (l.some((p) => p.session === session || p.of === session)) n++;
    return n;
  }

  /** Workers this session holds pins on. */
  workersOf(session: string): string[] {
    const out: string[] = [];
    for (const [w, m] of this.byWorker) {
      for (const l of m.values()) {
        if (l.some((p) => p.session === session)) {
          out.push(w);
          break;
        }
      }
    }
    return out;
  }

  /** Room a kind has left under its share of the per-worker budget. */
  shareRoom(worker: string, kind: PinHold["kind"], share: number): number {
    return Math.floor(this.perWorker * share) - this.usedBy(worker, kind);
  }

  /** Each session's holds of one kind on a worker, with the blocks only they hold (what releasing them frees). */
  groups(worker: string): { session: string; kind: PinHold["kind"]; freed: number }[] {
    const out = new Map<string, { session: string; kind: PinHold["kind"]; freed: number }>();
    for (const l of this.byWorker.get(worker)?.values() ?? []) {
      const only = l.every((p) => p.session === l[0].session && p.kind === l[0].kind);
      for (const p of l) {
        const k = `${p.kind}\u0000${p.session}`;
        let e = out.get(k);
        if (!e) {
          e = { session: p.session, kind: p.kind, freed: 0 };
          out.set(k, e);
        }
        if (only && p === l[0]) e.freed++;
      }
    }
    return [...out.values()];
  }

  /** Every live hold on one block of a worker (any session). */
  holdsAt(worker: string, hash: bigint): readonly PinHold[] {
    return this.byWorker.get(worker)?.get(hash) ?? [];
  }

  markFull(worker: string): void {
    this.full.add(worker);
  }

  forgetWorker(worker: string): void {
    for (const [h, l] of this.byWorker.get(worker) ?? []) this.settle(worker, h, l[l.length - 1]);
    this.byWorker.delete(worker);
    this.full.delete(worker);
    this.hit.delete(worker);
    this.lostHolds.delete(worker);
  }
}
