// Where a bench:agent run's wall time goes: each phase (server start, trace, flood, ...) timed in
// order, printed as it ends, and kept for the JSON, so a slow regime says which part is slow.
export class Phases {
  private last = performance.now();
  readonly s: Record<string, number> = {};

  constructor(
    private readonly label: string,
    private readonly log: (s: string) => void,
  ) {}

  /** Ends the phase that ran since the previous mark (or the start) and names it. */
  mark(name: string): void {
    const now = performance.now();
    const s = +((now - this.last) / 1000).toFixed(1);
    this.s[name] = +((this.s[name] ?? 0) + s).toFixed(1);
    this.last = now;
    this.log(`   [${this.label}] ${name} ${s} s`);
  }
}
