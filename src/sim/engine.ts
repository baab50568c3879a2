// One configuration's run: the programs of a workload through its front (the gateway's own objects,
// front/) and a fleet of simulated workers (python/kvctl_sim), on one virtual clock.
//
// The clock is the engine's. Its own events (a program's next request coming due, the front's
// timers) sit in the clock's queue. Between two of them it asks the fleet to run every worker up
// to the next one; the fleet stops early where a request finishes or a command is acked, since
// that can make the front act at that moment (the next request of the program, a queued request,
// the policy's commands). Microtasks the front starts (an admission ticket's wait) run to the end
// before the clock moves on, so every effect lands at the moment that caused it.
import { VirtualClock } from "./clock.js";
import type { FleetClient, FleetEvent, FleetInput, WorkerSpec } from "./fleet-client.js";
import type { PageIds } from "./page-ids.js";
import { ProgramTokens } from "./tokens.js";
import type { FrontHost, SimFront, Turn } from "./front/types.js";
import type { GapKind, SimProgram, SimWorkload } from "./types.js";

/** One request's life, as the metrics read it (times in s of the run). */
export interface RequestRecord {
  program: string;
  n: number;
  family: string;
  gapKind: GapKind;
  gapS: number;
  promptTokens: number;
  outputTokens: number;
  /** It reached the front. */
  arrival: number;
  /** Admission let it go to its worker. */
  sent: number | null;
  firstToken: number | null;
  finish: number | null;
  cached: number;
  hostLoaded: number;
  computed: number;
  worker: string | null;
  /** When its worker admitted it (matched its prefix). */
  admitted: number | null;
  /** The run's ids (oracle.ts PageIds) of its sequence's full pages, prompt then output. */
  pages: Int32Array | null;
}

export interface WorkerStats {
  prefill_s: number;
  bytes: Record<string, number>;
  [k: string]: unknown;
}

export interface ConfigRun {
  records: RequestRecord[];
  workers: Record<string, WorkerStats>;
  /** CPU seconds the fleet process used, and its round trips with the engine. */
  fleetCpuS: number;
  advances: number;
  simulatedS: number;
  /** When each program's last request finished (s), by program id. */
  programEnds: Map<string, number>;
  /** Distinct page ids its records name (ids run from 0). */
  pageCount: number;
}

export interface EngineOptions {
  workload: SimWorkload;
  profile: string;
  workers: readonly WorkerSpec[];
  /** The fleet process it runs on (one configuration at a time; `init` starts it afresh). */
  fleet: FleetClient;
  /** Numbers the pages every configuration's requests touch, for the oracle. */
  pageIds: PageIds;
  /** Builds the configuration's front once the engine (its host) exists. */
  front: (host: FrontHost) => SimFront;
  /** Called now and then with the run's progress (wall-clock spaced). */
  progress?: (p: { simulatedS: number; finished: number; total: number }) => void;
  log?: (line: string) => void;
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

export class SimEngine implements FrontHost {
  readonly clock = new VirtualClock();
  readonly workers: readonly string[];
  readonly pageSize: number;
  private readonly fleet: FleetClient;
  private front!: SimFront;
  private pending: FleetInput[] = [];
  private readonly acks = new Map<number, (b: Uint8Array) => void>();
  private cid = 0;
  private readonly turns = new Map<string, Turn>();
  private readonly records = new Map<string, RequestRecord>();
  private readonly tokens = new Map<string, ProgramTokens>();
  private readonly programEnds = new Map<string, number>();
  private finished = 0;
  private total = 0;

  constructor(private readonly o: EngineOptions) {
    this.workers = o.workers.map((w) => w.id);
    this.pageSize = o.workers[0].page_size;
    this.fleet = o.fleet;
  }

  // ---- FrontHost -------------------------------------------------------------------------

  dispatch(turn: Turn, worker: string): void {
    const rec = this.records.get(turn.rid) as RequestRecord;
    rec.sent = this.clock.now;
    rec.worker = worker;
    const p = turn.prepared;
    this.pending.push({
      kind: "req",
      t: this.clock.now,
      worker,
      rid: turn.rid,
      program: turn.program.id,
      keep: p.keep,
      prompt: p.promptTail,
      output: p.output,
      session: this.o.workers[0].session_radix ? turn.session : null,
    });
  }

  command(worker: string, body: Uint8Array): Promise<Uint8Array> {
    const cid = ++this.cid;
    this.pending.push({ kind: "command", t: this.clock.now, worker, cid, body });
    return new Promise((resolve) => this.acks.set(cid, resolve));
  }

  closeSession(worker: string, session: string): void {
    this.pending.push({ kind: "close", t: this.clock.now, worker, session });
  }

  // ---- programs --------------------------------------------------------------------------

  private due(program: SimProgram, n: number): void {
    const spec = program.requests[n];
    let toks = this.tokens.get(program.id);
    if (!toks) {
      toks = new ProgramTokens(this.o.workload.vocab, this.pageSize);
      this.tokens.set(program.id, toks);
    }
    const prepared = toks.prepare(spec);
    const rid = `${program.id}#${n}`;
    const turn: Turn = {
      rid,
      program,
      n,
      spec,
      prepared,
      arrival: this.clock.now,
      session: program.family === "flood" ? null : program.id,
      worker: null,
      ticket: null,
    };
    this.turns.set(rid, turn);
    this.records.set(rid, {
      program: program.id,
      n,
      family: program.family,
      gapKind: spec.gapKind,
      gapS: spec.gapS,
      promptTokens: prepared.promptLen,
      outputTokens: prepared.output.length,
      arrival: this.clock.now,
      sent: null,
      firstToken: null,
      finish: null,
      cached: 0,
      hostLoaded: 0,
      computed: 0,
      worker: null,
      admitted: null,
      pages: null,
    });
    this.front.arrive(turn);
  }

  private onEvent(e: FleetEvent): void {
    if (e.kind === "ack") {
      const resolve = this.acks.get(e.cid);
      this.acks.delete(e.cid);
      resolve?.(e.body);
      return;
    }
    const turn = this.turns.get(e.rid) as Turn;
    const rec = this.records.get(e.rid) as RequestRecord;
    if (e.kind === "first") {
      rec.firstToken = e.t;
      this.front.firstToken(turn);
      return;
    }
    rec.finish = e.t;
    rec.cached = e.cached;
    rec.hostLoaded = e.hostLoaded;
    rec.computed = e.computed;
    rec.admitted = e.admitted;
    this.turns.delete(e.rid);
    this.finished++;
    const chain = (this.tokens.get(turn.program.id) as ProgramTokens).commit(
      turn.spec,
      turn.prepared,
    );
    rec.pages = this.o.pageIds.of(chain);
    this.front.finished(turn, { chain, cachedTokens: e.cached });
    const next = turn.program.requests[turn.n + 1];
    if (next) this.clock.at(this.clock.now + next.gapS, () => this.due(turn.program, turn.n + 1));
    else this.programDone(turn.program);
  }

  private programDone(program: SimProgram): void {
    this.programEnds.set(program.id, this.clock.now);
    this.front.programEnded(program);
    this.tokens.delete(program.id);
    this.pending.push({ kind: "forget", program: program.id });
  }

  // ---- the loop --------------------------------------------------------------------------

  async run(): Promise<ConfigRun> {
    await this.fleet.init(this.o.profile, this.o.workers);
    this.front = this.o.front(this);
    for (const p of this.o.workload.programs) {
      this.total += p.requests.length;
      if (p.requests.length) this.clock.at(p.startS, () => this.due(p, 0));
    }
    await this.loop();
    const stats = await this.fleet.stats();
    return {
      records: [...this.records.values()],
      workers: stats.workers as Record<string, WorkerStats>,
      fleetCpuS: stats.cpuS,
      advances: stats.advances,
      simulatedS: this.clock.now,
      programEnds: this.programEnds,
      pageCount: this.o.pageIds.size,
    };
  }

  private async loop(): Promise<void> {
    let lastProgress = performance.now();
    for (;;) {
      await settle();
      const until = this.clock.next();
      const r = await this.fleet.advance(until, this.pending.splice(0));
      for (const f of r.frames) this.front.applyFrame(f.worker, f.payload);
      const events = r.events.slice().sort((a, b) => a.t - b.t);
      for (const e of events) {
        this.clock.now = Math.max(this.clock.now, e.t);
        this.onEvent(e);
        await settle();
      }
      if (r.at === null || (until !== null && r.at >= until)) {
        if (until === null) {
          if (this.pending.length) continue;
          this.checkDone(r.busy);
          return;
        }
        while (this.clock.runOne(until)) await settle();
      } else this.clock.now = Math.max(this.clock.now, r.at);
      if (this.o.progress && performance.now() - lastProgress > 2000) {
        lastProgress = performance.now();
        this.o.progress({ simulatedS: this.clock.now, finished: this.finished, total: this.total });
      }
    }
  }

  private checkDone(busy: boolean): void {
    if (this.finished === this.total) return;
    const left = [...this.turns.values()]
      .slice(0, 5)
      .map((t) => `${t.rid} (${t.prepared.promptLen} tokens, ${t.worker ?? "not routed"})`);
    throw new Error(
      `the run stopped with ${this.total - this.finished} of ${this.total} requests unfinished${busy ? " on workers that cannot schedule them" : " waiting at the front"}: ${left.join(", ")}`,
    );
  }
}
