// Program admission (`admission.mode: program`), after ThunderAgent's program scheduler: the unit
// admitted to a worker is an agent's tool loop, not one request. A session admitted keeps its slot
// from its first request through every tool call until a reply ends without one, so a request
// that comes back from a tool never queues behind a newcomer whose prefill would evict its prefix.
// Under KV pressure (the working sets of the programs holding slots above `pauseAt` of the
// worker's device + host capacity) whole programs are paused at a tool boundary, smallest first,
// until the rest fit under `resumeBelow`; a paused program's next request waits, ahead of new
// programs, until its working set fits under `resumeBelow` again (hysteresis). It sends no cache
// command: what a paused program loses is whatever the worker's own cache evicts meanwhile.
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
}

/** A request's ticket; `release(true)` says its reply was a tool call (the program goes on). */
export interface ProgramTicket extends AdmissionTicket {
  release(continues?: boolean): void;
}

interface Program {
  id: string;
  /** Tokens of its latest prompt: the context it keeps on the worker. */
  tokens: number;
  /** waiting: not yet admitted; running: a request on the worker; acting: between tool calls. */
  state: "waiting" | "running" | "acting" | "paused";
  hold: NodeJS.Timeout | null;
}

interface Waiter {
  program: Program;
  admit: () => void;
}

export class ProgramGate {
  private readonly programs = new Map<string, Program>();
  private readonly queue: Waiter[] = [];
  private anonymous = 0;
  /** Programs paused under KV pressure (counted for the gateway's metrics). */
  pausedTotal = 0;

  constructor(private readonly limits: ProgramLimits) {
    if (!(limits.resumeBelow > 0 && limits.resumeBelow < limits.pauseAt && limits.pauseAt <= 1)) {
      throw new Error(`admission: expected 0 < resumeBelow < pauseAt <= 1, got ${limits.resumeBelow} / ${limits.pauseAt}`);
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
    for (const p of this.programs.values()) if (p.state === "running" || p.state === "acting") n += p.tokens;
    return n;
  }

  /** A request of `program` (a session id; null: a request of its own) with `tokens` of prompt. */
  enter(tokens: number, program: string | null): ProgramTicket {
    const id = program ?? `\u0000request ${++this.anonymous}`;
    let p = this.programs.get(id);
    // A program in its tool loop (or with a request already running) has its slot.
    const holds = p !== undefined && (p.state === "acting" || p.state === "running");
    if (!p) {
      p = { id, tokens, state: "waiting", hold: null };
      this.programs.set(id, p);
    }
    const prog = p;
    prog.tokens = tokens;
    if (prog.hold) clearTimeout(prog.hold);
    prog.hold = null;
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
    const queued = !holds && (this.queue.length > 0 || !this.fits(prog));
    if (queued) this.queue.push(w);
    else admit();
    return {
      ready,
      queued,
      release: (continues?: boolean) => {
        if (state === "done") return;
        if (state === "waiting") {
          this.queue.splice(this.queue.indexOf(w), 1);
          if (prog.state === "waiting") this.programs.delete(prog.id);
        } else this.finish(prog, continues === true && program !== null);
        state = "done";
        this.pump();
      },
    };
  }

  /** A program's request ended: it keeps its slot through its tool loop, or lets it go. */
  private finish(p: Program, continues: boolean): void {
    if (!continues) {
      this.programs.delete(p.id);
      return;
    }
    p.state = "acting";
    p.hold = setTimeout(() => {
      p.hold = null;
      if (p.state !== "acting") return;
      this.programs.delete(p.id);
      this.pump();
    }, this.limits.holdMs);
    p.hold.unref?.();
    this.relievePressure();
  }

  /** Above `pauseAt`, pause programs between tool calls, smallest first, down to `resumeBelow`. */
  private relievePressure(): void {
    const { capacityTokens, pauseAt, resumeBelow } = this.limits;
    if (this.usedTokens <= pauseAt * capacityTokens) return;
    const acting = [...this.programs.values()].filter((p) => p.state === "acting").sort((a, b) => a.tokens - b.tokens);
    for (const p of acting) {
      if (this.usedTokens <= resumeBelow * capacityTokens) break;
      p.state = "paused";
      if (p.hold) clearTimeout(p.hold);
      p.hold = null;
      this.pausedTotal++;
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
      const paused = this.queue.filter((w) => w.program.state === "paused").sort((a, b) => a.program.tokens - b.program.tokens);
      const next = paused[0] ?? this.queue[0];
      if (!next || !this.fits(next.program)) return;
      this.queue.splice(this.queue.indexOf(next), 1);
      next.admit();
    }
  }
}
