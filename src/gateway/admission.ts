// Admission: a worker is sent at most what it can run at once; the rest wait at the gateway, in
// arrival order. A request waiting in SGLang's own queue protects nothing: until it is scheduled
// its cached prefix is ordinary cache, and requests that run meanwhile evict it (or evict the span
// HiCache prefetched for it from storage before it is admitted), so it recomputes what was cached
// when it arrived. Waiting here costs no cache: the request is routed (its worker chosen, the
// load counted) but reaches the worker only when it can run there. Off unless a limit is set.

export interface AdmissionLimits {
  /** Requests a worker runs at once (unset: no request limit). */
  maxRequests?: number | undefined;
  /** Prompt tokens a worker runs at once, typically its device pool (unset: no token limit). A
   * request larger than this still runs, alone. */
  maxPromptTokens?: number | undefined;
}

interface Waiter {
  tokens: number;
  admit: () => void;
}

/** A ticket for one request: `ready` resolves when it may go to the worker. */
export interface AdmissionTicket {
  ready: Promise<void>;
  /** It waited (it did not find room at once). */
  queued: boolean;
  /** Leaves the queue if still waiting, or frees its room if admitted; once only. */
  release(): void;
}

export class AdmissionGate {
  running = 0;
  runningTokens = 0;
  private readonly queue: Waiter[] = [];

  constructor(private readonly limits: AdmissionLimits) {}

  get waiting(): number {
    return this.queue.length;
  }

  static enabled(limits: AdmissionLimits | undefined): boolean {
    return (
      limits !== undefined &&
      (limits.maxRequests !== undefined || limits.maxPromptTokens !== undefined)
    );
  }

  private fits(tokens: number): boolean {
    if (this.running === 0) return true;
    const { maxRequests, maxPromptTokens } = this.limits;
    if (maxRequests !== undefined && this.running >= maxRequests) return false;
    return maxPromptTokens === undefined || this.runningTokens + tokens <= maxPromptTokens;
  }

  enter(tokens: number): AdmissionTicket {
    let state: "waiting" | "running" | "done" = "waiting";
    const start = () => {
      state = "running";
      this.running++;
      this.runningTokens += tokens;
    };
    let admit: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => {
      admit = () => {
        start();
        resolve();
      };
    });
    const w: Waiter = { tokens, admit };
    // Arrival order: nobody passes a request already waiting.
    const queued = this.queue.length > 0 || !this.fits(tokens);
    if (queued) this.queue.push(w);
    else admit();
    return {
      ready,
      queued,
      release: () => {
        if (state === "done") return;
        if (state === "running") {
          this.running--;
          this.runningTokens -= tokens;
        } else {
          this.queue.splice(this.queue.indexOf(w), 1);
        }
        state = "done";
        this.pump();
      },
    };
  }

  private pump(): void {
    while (this.queue.length > 0 && this.fits(this.queue[0].tokens))
      (this.queue.shift() as Waiter).admit();
  }
}

/** A ticket whose release may say the reply was a tool call (the session's program goes on). */
export interface GateTicket extends AdmissionTicket {
  /** `tools`: the names of the calls a tool-call reply made. */
  release(continues?: boolean, tools?: readonly (string | null)[]): void;
}

export interface Gate {
  readonly waiting: number;
  /** A request of `program` (its session id, or null) with `tokens` of prompt. */
  enter(tokens: number, program: string | null): GateTicket;
}
