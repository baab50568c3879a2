// Program admission (`admission.mode: program`), after ThunderAgent's program scheduler: the unit
// admitted to a worker is an agent's tool loop, not one request. A session admitted keeps its slot
// from its first request through every tool call until a reply ends without one, so a request
// that comes back from a tool never queues behind a newcomer whose prefill would evict its prefix.
// Under KV pressure (the working sets of the programs holding slots above `pauseAt` of the
// worker's device + host capacity) whole programs are paused at a tool boundary, smallest first,
// until the rest fit under `resumeBelow`; a paused program's next request waits, ahead of new
// programs, until its working set fits under `resumeBelow` again (hysteresis). With no retention it
// sends no cache command: what a paused program loses is whatever the worker's own cache evicts
// meanwhile. With one (the policy's; src/policy/program-retention.ts), each tool boundary is one decision for the program:
// keep its slot and KV for a TTL, park it on host under a lease (slot freed; its blocks are brought
// back before its next request is admitted, bounded by a deadline), or let it go.
import type { ProgramRetention } from "../contract/policy.js";
import type { AdmissionTicket } from "./admission.js";

export interface ProgramLimits {
  /** Programs holding a slot on the worker at once (running or between tool calls). */
  maxPrograms: number;
  /** The worker's device + host KV capacity in tokens (the programs' working sets are held to it). */
  capacityTokens: number;
  /** Share of capacity above which programs are paused at their next tool boundary. */
  pauseAt: number;
  /** Share of capacity pausing brings usage down to, and under which paused programs resume. */
  resumeBelow: number;
  /** A program between tool calls keeps its slot at most this long (ms) before it is let go. */
  holdMs: number;
  /** Longest a parked program's next request waits for its blocks to come back before it is admitted anyway (ms). */
  prefetchDeadlineMs?: number;
}

/** A request's ticket; `release(true)` says its reply was a tool call (the program goes on). */
export interface ProgramTicket extends AdmissionTicket {
  /** `tools`: the names of the calls the reply made (what the gap is predicted from). */
  release(continues?: boolean, tools?: readonly (string | null)[]): void;
}

/** Where the gate's timers run: the process's by default; kvctl sim sets its virtual clock's. */
export interface GateTimers {
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const PROCESS_TIMERS: GateTimers = {
  setTimeout: (f, ms) => setTimeout(f, ms).unref(),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

/** A program's KV is no longer kept for it: let go at a tool boundary, or paused under pressure. */
export type ProgramReleasedHook = (program: string, why: "let_go" | "pressure") => void;

interface Program {
  id: string;
  /** Tokens of its latest prompt: the context it keeps on the worker. */
  tokens: number;
  /** waiting: not yet admitted; running: a request on the worker; acting: between tool calls. */
  state: "waiting" | "running" | "acting" | "paused";
  hold: unknown;
  /** The retention decision of its current gap (null: none, or it lapsed). */
  kept: "keep" | "park" | "let_go" | null;
}

interface Waiter {
  program: Program;
  admit: () => void;
  /** Its blocks are being brought back; it holds the slot meanwhile. */
  restoring?: boolean;
  cancelled?: boolean;
}

export class ProgramGate {
  private readonly programs = new Map<string, Program>();
  private readonly queue: Waiter[] = [];
  private anonymous = 0;
  /** Programs paused under KV pressure (counted for the gateway's metrics). */
  pausedTotal = 0;

  constructor(
    private readonly limits: ProgramLimits,
    private readonly retention: ProgramRetention | null = null,
    private readonly released: ProgramReleasedHook | null = null,
    private readonly timers: GateTimers = PROCESS_TIMERS,
  ) {
    if (!(limits.resumeBelow > 0 && limits.resumeBelow < limits.pauseAt && limits.pauseAt <= 1)) {
      throw new Error(
        `admission: expected 0 < resumeBelow < pauseAt <= 1, got ${limits.resumeBelow} / ${limits.pauseAt}`,
      );
    }
  }

  get waiting(): number {
    return this.queue.length;
  }

  /** Programs holding a slot (running a request or between tool calls). */
  get holding(): number {
    let n = 0;
    for (const p of this.programs.values()) if (p.state === "running" || p.state === "acting") n++;
    return n;
  }

  /** Working-set tokens of the programs holding a slot. */
  get usedTokens(): number {
    let n = 0;
    for (const p of this.programs.values())
      if (p.state === "running" || p.state === "acting") n += p.tokens;
    return n;
  }

  /** A request of `program` (a session id; null: a request of its own) with `tokens` of prompt. */
  enter(tokens: number, program: string | null): ProgramTicket {
    const id = program ?? `\u0000request ${++this.anonymous}`;
    let p = this.programs.get(id);
    // A program in its tool loop (or with a request already running) has its slot.
    const holds = p !== undefined && (p.state === "acting" || p.state === "running");
    if (!p) {
      p = { id, tokens, state: "waiting", hold: null, kept: null };
      this.programs.set(id, p);
    }
    const prog = p;
    prog.tokens = tokens;
    if (prog.hold) this.timers.clearTimeout(prog.hold);
    prog.hold = null;
    if (program !== null) this.retention?.returned(id);
    let state: "waiting" | "running" | "done" = "waiting";
    let admit: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => {
      admit = () => {
        state = "running";
        prog.state = "running";
        resolve();
      };
    });
    const w: Waiter = { program: prog, admit };
    // A parked program's blocks come back before it runs: it goes through the queue's pump.
    const restore =
      prog.state === "paused" && prog.kept === "park" && this.retention?.prefetch !== undefined;
    const queued = !holds && (restore || this.queue.length > 0 || !this.fits(prog));
    if (queued) this.queue.push(w);
    else admit();
    if (restore) this.pump();
    return {
      ready,
      queued,
      release: (continues?: boolean, tools?: readonly (string | null)[]) => {
        if (state === "done") return;
        if (state === "waiting") {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          if (w.restoring) {
            // Gone while its blocks came back: the slot it held goes.
            w.cancelled = true;
            this.programs.delete(prog.id);
          } else if (prog.state === "waiting") this.programs.delete(prog.id);
        } else this.finish(prog, continues === true && program !== null, tools ?? []);
        state = "done";
        this.pump();
      },
    };
  }

  /** A program's request ended: it keeps its slot through its tool loop, or lets it go. */
  private finish(p: Program, continues: boolean, tools: readonly (string | null)[]): void {
    p.kept = null;
    if (!continues) {
      this.programs.delete(p.id);
      return;
    }
    const d = this.retention?.decide(p.id, p.tokens, tools) ?? null;
    p.kept = d?.action ?? null;
    if (d?.action === "let_go") this.released?.(p.id, "let_go");
    if (d && d.action !== "keep") {
      // Its slot goes now; it still comes back ahead of new programs. A parked one is forgotten when
      // its lease runs out (its next request is then a new program's, re-prefilled), one let go
      // after holdMs.
      p.state = "paused";
      this.later(p, d.action === "park" ? d.ttlSeconds * 1000 : this.limits.holdMs, () => {
        if (d.action === "park") this.retention?.lapsed(p.id, "lease");
        this.programs.delete(p.id);
      });
      this.pump();
      return;
    }
    p.state = "acting";
    const ms = d ? Math.min(d.ttlSeconds * 1000, this.limits.holdMs) : this.limits.holdMs;
    this.later(p, ms, () => {
      if (p.state !== "acting") return;
      if (d) this.retention?.lapsed(p.id, "ttl");
      this.programs.delete(p.id);
      this.pump();
    });
    this.relievePressure();
  }

  private later(p: Program, ms: number, f: () => void): void {
    p.hold = this.timers.setTimeout(() => {
      p.hold = null;
      f();
    }, ms);
  }

  /** Above `pauseAt`, pause programs between tool calls, smallest first, down to `resumeBelow`. */
  private relievePressure(): void {
    const { capacityTokens, pauseAt, resumeBelow } = this.limits;
    if (this.usedTokens <= pauseAt * capacityTokens) return;
    const acting = [...this.programs.values()]
      .filter((p) => p.state === "acting")
      .sort((a, b) => a.tokens - b.tokens);
    for (const p of acting) {
      if (this.usedTokens <= resumeBelow * capacityTokens) break;
      p.state = "paused";
      if (p.hold) this.timers.clearTimeout(p.hold);
      p.hold = null;
      if (p.kept === "keep") this.retention?.lapsed(p.id, "pressure");
      p.kept = null;
      this.pausedTotal++;
      this.released?.(p.id, "pressure");
    }
  }

  private fits(p: Program): boolean {
    if (this.holding === 0) return true;
    if (this.holding >= this.limits.maxPrograms) return false;
    // A paused program comes back only under the lower mark (hysteresis); a new one under the upper.
    const share = p.state === "paused" ? this.limits.resumeBelow : this.limits.pauseAt;
    return this.usedTokens + p.tokens <= share * this.limits.capacityTokens;
  }

  /** Admits waiters that fit: paused programs first (smallest first), then new ones in arrival order. */
  private pump(): void {
    for (;;) {
      const paused = this.queue
        .filter((w) => w.program.state === "paused")
        .sort((a, b) => a.program.tokens - b.program.tokens);
      const next = paused[0] ?? this.queue[0];
      if (!next || !this.fits(next.program)) return;
      this.queue.splice(this.queue.indexOf(next), 1);
      if (
        next.program.state === "paused" &&
        next.program.kept === "park" &&
        this.retention?.prefetch
      )
        this.restoreThenAdmit(next);
      else next.admit();
    }
  }

  /**
   * Prefetch, then admit: a parked program's slot is taken now and its request admitted once the
   * worker says its blocks are back on the device, or at the deadline whatever the restore did
   * (a restore that fails or is partial admits at once: the request re-prefills what is missing).
   */
  private restoreThenAdmit(w: Waiter): void {
    const r = this.retention as ProgramRetention & Required<Pick<ProgramRetention, "prefetch">>;
    const p = w.program;
    p.state = "running";
    p.kept = null;
    w.restoring = true;
    let timer: unknown;
    const deadline = new Promise<"timeout">((resolve) => {
      timer = this.timers.setTimeout(
        () => resolve("timeout"),
        this.limits.prefetchDeadlineMs ?? 2000,
      );
    });
    const restore = r.prefetch(p.id).catch(() => "failed" as const);
    void Promise.race([restore, deadline]).then((outcome) => {
      this.timers.clearTimeout(timer);
      w.restoring = false;
      r.prefetched?.(p.id, outcome);
      if (w.cancelled) {
        this.pump();
        return;
      }
      w.admit();
    });
  }
}
