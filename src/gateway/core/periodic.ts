// A task the gateway runs on a timer (health checks, Inspect rounds, the replica heartbeat, the
// expiry and idle sweeps): the timer never keeps the process alive, a run still going when the
// next is due (or asked for) is joined instead of doubled, and stop waits for the run under way.

export class Periodic {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  /**
   * `task` runs every `intervalMs` once started (never when it is 0 or less); a run that throws
   * is handed to `failed` (the gateway's log), and the next runs on time.
   */
  constructor(
    private readonly task: () => Promise<void>,
    private readonly intervalMs: number,
    private readonly failed: (e: Error) => void,
  ) {}

  start(): void {
    if (this.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.run(), this.intervalMs);
    this.timer.unref();
  }

  get started(): boolean {
    return this.timer !== null;
  }

  /** One run now; the run under way, if there is one. */
  run(): Promise<void> {
    this.running ??= this.task()
      .catch((e) => this.failed(e as Error))
      .finally(() => {
        this.running = null;
      });
    return this.running;
  }

  /** Stops the timer; a run under way goes on. */
  cancel(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Stops the timer and waits for the run under way. */
  async stop(): Promise<void> {
    this.cancel();
    await this.running;
  }
}
