// A seeded random stream of what a gateway hands its policy: sessions' turns (prompts growing,
// rewritten, tool calls, reasoning, cache markers, failures), idle sessions, hints, restarts,
// workers' pin counts, turns carrying a session record, and the workers' answers to the commands
// the policy sent (applied, partial, refused, lost), in any order. Each observation goes to the
// policy as it is made; the stream is the same for the same seed and the same answers.
import type { Observation, TurnFinished, TurnStarted } from "../../src/contract/observations.js";
import type { PolicyCommand } from "../../src/contract/policy.js";
import { uniform } from "./random.js";

export const STREAM_PAGE = 4;
const WORKERS = ["w0", "w1"];

interface Sess {
  chain: bigint[];
  worker: string;
  calls: string[];
}

export interface StreamOptions {
  steps: number;
  /** Turns that carry a session record (other replicas' holds adopted into the view). */
  stored: boolean;
}

export interface Fed {
  ob: Observation;
  out: readonly PolicyCommand[];
}

/** Feeds the policy `steps` observations; `observe` is the policy's. Returns each with its commands. */
export function feedStream(
  seed: number,
  observe: (o: Observation) => readonly PolicyCommand[],
  o: StreamOptions,
): Fed[] {
  const g = new Stream(seed, observe);
  for (const w of WORKERS)
    g.feed({ type: "WorkerJoined", at: g.now, worker: w, pageSize: STREAM_PAGE });
  for (let i = 0; i < o.steps; i++) g.step(i, o.stored);
  return g.fed;
}

class Stream {
  readonly fed: Fed[] = [];
  now = 1000;
  private base = 1n;
  private readonly r: () => number;
  private readonly sessions = new Map<string, Sess>();
  /** Commands not answered yet. */
  private pending: PolicyCommand[] = [];

  constructor(
    seed: number,
    private readonly observe: (o: Observation) => readonly PolicyCommand[],
  ) {
    this.r = uniform(seed);
  }

  private pick<T>(a: readonly T[]): T {
    return a[Math.floor(this.r() * a.length)];
  }

  feed(ob: Observation): void {
    const out = this.observe(ob);
    this.fed.push({ ob, out });
    this.pending.push(...out);
    if (this.pending.length > 60) this.pending = this.pending.slice(-40);
  }

  step(i: number, stored: boolean): void {
    const r = this.r;
    this.now += Math.floor(r() * (r() < 0.2 ? 60_000 : 3000));
    const sid = `s${Math.floor(r() * 6)}`;
    const x = r();
    if (x < 0.3) this.turn(i, sid);
    else if (x < 0.5) this.answer();
    else if (x < 0.6) {
      const s = this.sessions.get(sid);
      this.feed({
        type: "SessionIdle",
        at: this.now,
        sessionId: sid,
        worker: s?.worker ?? null,
        idleMs: 30_000,
        chain: s?.chain ?? [],
      });
    } else if (x < 0.75) this.hint(sid);
    else if (x < 0.8)
      this.feed({
        type: "WorkerCleared",
        at: this.now,
        worker: this.pick(WORKERS),
        reason: this.pick(["restart", "drained", "gap"] as const),
      });
    else if (x < 0.85) {
      const pins = new Map<bigint, number>();
      for (const s of this.sessions.values())
        for (const h of s.chain) if (r() < 0.3) pins.set(h, Math.floor(r() * 2));
      this.feed({ type: "WorkerPins", at: this.now, worker: this.pick(WORKERS), pins });
    } else if (stored) this.recorded(i, sid);
  }

  private turn(i: number, sid: string): void {
    const r = this.r;
    const s = this.sessions.get(sid) ?? { chain: [], worker: this.pick(WORKERS), calls: [] };
    this.sessions.set(sid, s);
    if (r() < 0.1) s.worker = this.pick(WORKERS);
    const keep =
      s.chain.length > 2 && r() < 0.15 ? Math.floor(r() * s.chain.length) : s.chain.length;
    const prompt = s.chain.slice(0, keep);
    if (r() < 0.3 && prompt.length === 0) prompt.push(9000n, 9001n);
    for (let k = 1 + Math.floor(r() * 5); k > 0; k--) prompt.push(this.base++);
    const toolTail = s.calls.length > 0 && r() < 0.8;
    const start: TurnStarted = {
      type: "TurnStarted",
      at: this.now,
      requestId: `r${i}`,
      sessionId: sid,
      route: "chat",
      stream: false,
      worker: s.worker,
      reason: "session",
      promptBlocks: prompt,
      overlap:
        r() < 0.5
          ? { GPU: Math.floor(r() * prompt.length), CPU_PINNED: 0, DISK: 0, EXTERNAL: 0 }
          : null,
      tail: toolTail
        ? { role: "tool", toolCallIds: r() < 0.9 ? s.calls : ["zz"] }
        : { role: r() < 0.8 ? "user" : "assistant", toolCallIds: [] },
      tenant: r() < 0.3 ? "t1" : null,
      model: r() < 0.3 ? "qwen3-interleaved" : "tiny",
    };
    this.feed(start);
    if (r() < 0.5) this.answer();
    this.now += Math.floor(r() * 2000);
    this.feed(this.finish(i, start, s));
  }

  private finish(i: number, start: TurnStarted, s: Sess): TurnFinished {
    const r = this.r;
    const prompt = start.promptBlocks ?? [];
    const out = 1 + Math.floor(r() * 4);
    const chain = [...prompt];
    for (let k = 0; k < out; k++) chain.push(this.base++);
    const calls =
      r() < 0.45
        ? Array.from({ length: 1 + Math.floor(r() * 2) }, (_, k) => ({
            id: `c${i}_${k}`,
            name: this.pick(["grep", "bash", null]),
          }))
        : [];
    const status = r() < 0.92 ? 200 : 0;
    const at = prompt.length * STREAM_PAGE + 1;
    const reasoning =
      r() < 0.4 ? { start: at, end: at + Math.floor(r() * out * STREAM_PAGE) } : null;
    const marked = r() < 0.4;
    const markers = marked
      ? {
          breakpoints:
            r() < 0.9
              ? [
                  {
                    tokens: Math.min(2, prompt.length) * STREAM_PAGE,
                    ttlSeconds: 3600,
                    at: "system",
                  },
                  { tokens: prompt.length * STREAM_PAGE, ttlSeconds: 300, at: "message[0]" },
                ]
              : [],
          errors: r() < 0.05 ? ["bad"] : [],
        }
      : null;
    if (status === 200) {
      s.chain = chain;
      s.calls = calls.flatMap((c) => [c.id]);
    }
    return {
      type: "TurnFinished",
      at: this.now,
      requestId: start.requestId,
      sessionId: start.sessionId,
      route: "chat",
      worker: start.worker,
      status,
      error: status ? null : "timeout",
      finishReason: calls.length ? "tool_calls" : "stop",
      usage: {
        promptTokens: prompt.length * STREAM_PAGE,
        completionTokens: out * STREAM_PAGE,
        cachedTokens: Math.floor(r() * prompt.length) * STREAM_PAGE,
      },
      promptTokens: Array.from({ length: prompt.length * STREAM_PAGE }, (_, k) => k + 1),
      outputTokens: [1],
      chain: status ? chain : [],
      ranges: reasoning
        ? {
            system: null,
            history: { start: 0, end: 0 },
            prompt: { start: 0, end: 0 },
            reasoning,
            output: null,
          }
        : null,
      toolCalls: calls,
      durationMs: 10,
      model: start.model,
      cacheMarkers: markers,
      workerDeviceBlocks: r() < 0.5 ? Math.floor(r() * 60) : null,
    };
  }

  private hint(sid: string): void {
    const r = this.r;
    const event = this.pick(["tool_start", "tool_end", "idle", "close", "rewrite"] as const);
    const s = this.sessions.get(sid);
    const keepTokens =
      event === "rewrite" && r() >= 0.3
        ? Math.floor(r() * ((s?.chain.length ?? 1) * STREAM_PAGE))
        : null;
    this.feed({
      type: "SessionHint",
      at: this.now,
      sessionId: sid,
      event,
      toolName: event === "tool_start" ? "grep" : null,
      toolCallId: r() < 0.5 ? (s?.calls[0] ?? "c") : null,
      keepTokens,
    });
    if (event === "close") this.sessions.delete(sid);
  }

  /** A turn carrying the session store's record: a seen session's (resync), or a new one's (restore). */
  private recorded(i: number, sid: string): void {
    const r = this.r;
    const seen = this.sessions.get(sid);
    const id = seen?.chain.length ? sid : `n${i}`;
    const worker = seen?.worker ?? this.pick(WORKERS);
    const chain = seen?.chain.length ? seen.chain : [this.base++, this.base++, this.base++];
    const pins =
      r() < 0.5
        ? [
            {
              worker,
              blockHashes: chain.slice(0, 2).map(String),
              ttlSeconds: 3600,
              atMs: this.now - 10_000,
            },
          ]
        : [];
    const leases =
      r() < 0.4
        ? [
            {
              worker,
              leaseId: `${id}.7`,
              blockHashes: chain.slice(-2).map(String),
              ttlSeconds: 600,
              atMs: this.now - 1000,
            },
          ]
        : [];
    const tool = !seen && r() < 0.3 ? { worker, epoch: 4, startedMs: this.now - 500 } : null;
    const start: TurnStarted = {
      type: "TurnStarted",
      at: this.now,
      requestId: `q${i}`,
      sessionId: id,
      route: "chat",
      stream: false,
      worker,
      reason: "session",
      promptBlocks: chain,
      overlap: null,
      tail: { role: "user", toolCallIds: [] },
      stored: { worker, pins, leases, tool },
    };
    this.feed(start);
    if (!seen) this.sessions.set(id, { chain, worker, calls: [] });
  }

  /** The workers answer one to three of the commands still waiting, in any order. */
  private answer(): void {
    const r = this.r;
    for (let n = 1 + Math.floor(r() * 3); n > 0 && this.pending.length; n--) {
      const [pc] = this.pending.splice(Math.floor(r() * this.pending.length), 1);
      const status = this.pick([
        "applied",
        "applied",
        "applied",
        "partial",
        "rejected",
        "noop",
        "duplicate",
        "failed",
      ]);
      const hashes = ("block_hashes" in pc.command ? pc.command.block_hashes : undefined) ?? [];
      const extra: { affected: number; missing?: bigint[]; skipped?: number } = {
        affected: Math.floor(r() * (hashes.length + 1)),
      };
      if (status === "partial" && r() < 0.5) {
        extra.missing = hashes.filter(() => r() < 0.3);
        extra.skipped = Math.floor(r() * 3);
      }
      if (status === "noop" && r() < 0.5) extra.missing = hashes;
      const epoch = pc.command.type === "ToolStart" && r() < 0.8 ? 5 : null;
      const detail = r() < 0.5 ? "budget" : null;
      this.feed({
        type: "CommandAcked",
        at: this.now,
        sessionId: pc.sessionId ?? null,
        worker: pc.worker,
        commandType: pc.command.type,
        status,
        commandId: pc.id ?? null,
        command: pc.command,
        ...extra,
        epoch,
        detail,
      });
    }
  }
}
