// Log lines for problems that can come a million at a time (bad events on a flooded socket): each
// problem is counted by key (a worker) and kind, and at most one line per key per interval is
// written. The first problem after a quiet interval is written at once, with its detail; the ones
// that follow within the interval are folded into one summary line written when it ends:
//   "w0 seq 7: event 0: event is nil (skipped)"                       (key, a space, the detail)
//   "w0: 1048576 × bad event: event is nil in the last 2 s (last: seq 8: event 1048575: ...)"
// so a tool's own periodic output never waits behind its logging.

export interface RateLimitedLogOptions {
  /** Where lines go. */
  write: (line: string) => void;
  /** At most one line per key per this many ms. Default 2000. */
  intervalMs?: number;
  /** Distinct kinds kept per key and interval before the rest are counted as "other problems". Default 16. */
  maxKinds?: number;
  now?: () => number;
}

interface KeyState {
  lastLine: number;
  counts: Map<string, number>;
  lastDetail: string;
  timer: NodeJS.Timeout | null;
}

const OTHER = "other problems";

export class RateLimitedLog {
  private readonly write: (line: string) => void;
  private readonly interval: number;
  private readonly maxKinds: number;
  private readonly now: () => number;
  private readonly keys = new Map<string, KeyState>();
  /** Lines written so far (tests and `watch --json` read it). */
  lines = 0;

  constructor(opts: RateLimitedLogOptions) {
    this.write = opts.write;
    this.interval = opts.intervalMs ?? 2000;
    this.maxKinds = opts.maxKinds ?? 16;
    this.now = opts.now ?? Date.now;
  }

  /** Counts `n` problems of `kind` for `key`; `detail` describes the latest one. */
  note(key: string, kind: string, detail: string, n = 1): void {
    let s = this.keys.get(key);
    if (!s) {
      s = { lastLine: -Infinity, counts: new Map(), lastDetail: "", timer: null };
      this.keys.set(key, s);
    }
    const k = s.counts.has(kind) || s.counts.size < this.maxKinds ? kind : OTHER;
    s.counts.set(k, (s.counts.get(k) ?? 0) + n);
    s.lastDetail = detail;
    const now = this.now();
    if (now - s.lastLine >= this.interval) {
      this.emit(key, s, now);
      return;
    }
    if (!s.timer) {
      s.timer = setTimeout(
        () => {
          const st = this.keys.get(key);
          if (st) {
            st.timer = null;
            this.emit(key, st, this.now());
          }
        },
        s.lastLine + this.interval - now,
      );
      s.timer.unref();
    }
  }

  private emit(key: string, s: KeyState, now: number): void {
    // A line written from note() supersedes the pending summary: a timer left armed would fire
    // right after it (the loop was busy past its deadline) with a near-empty window.
    if (s.timer) {
      clearTimeout(s.timer);
      s.timer = null;
    }
    if (s.counts.size === 0) return;
    const total = [...s.counts.values()].reduce((a, b) => a + b, 0);
    const since = Number.isFinite(s.lastLine) ? now - s.lastLine : 0;
    if (total === 1) this.write(`${key} ${s.lastDetail}`);
    else {
      const parts = [...s.counts].map(([kind, c]) => `${c} × ${kind}`).join(", ");
      const window = since > 0 ? ` in the last ${Math.round(since / 100) / 10} s` : "";
      this.write(`${key}: ${parts}${window} (last: ${s.lastDetail})`);
    }
    this.lines++;
    s.counts.clear();
    s.lastLine = now;
  }

  /** Writes what is still pending now (call before exiting) and stops the timers. */
  flush(): void {
    const now = this.now();
    for (const [key, s] of this.keys) {
      if (s.timer) clearTimeout(s.timer);
      s.timer = null;
      this.emit(key, s, now);
    }
  }
}
