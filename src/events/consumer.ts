// ZMQ SUB consumer of KV events in the SGLang/vLLM framing [topic, seq (8-byte BE), payload].
//
// It tracks each publisher's seq: a gap is reported and, when the worker offers a ROUTER replay
// socket, the missing batches are requested from it while live batches are held back, so that
// a removal is never applied before a replayed store; a duplicate is dropped; a restart (seq back
// to 0 or far below, or back at all with a batch stamped later than any seen: see classify)
// clears the worker's view before the new stream applies. Everything is
// counted in `metrics` and emitted as an event. Bad input (wrong frame counts, a short seq
// frame, undecodable payloads, bad events) is counted per kind and skipped; the loop never stops
// on it. Problems that can come per event or per batch are logged through a rate limiter (one
// line per worker per interval, however many), so a flood of garbage cannot stall the process.
// Under flood the socket's receive high-water mark bounds what queues up (ZMQ drops the rest at
// the publisher), the batches held back during a replay are bounded too, and what was dropped is
// known from the seq numbers (`metrics.missedBatches`, shown as "dropped"). A message larger than
// the size cap is refused by ZMQ itself (ZMQ_MAXMSGSIZE) as its header arrives, before any of it
// is buffered. ZMQ then drops the connection and, since it takes that for a protocol error, never
// reconnects it: the consumer notices (no reconnect follows the drop), counts and logs it, and opens
// a fresh socket.
import { EventEmitter } from "node:events";
import { Dealer, Subscriber } from "zeromq";
import { BatchDecodeError, batchTs, decodeBatch, decodeSeq, encodeSeq, END_SEQ } from "./decode.js";
import { SeqTracker, type SeqVerdict } from "./seq.js";
import { RateLimitedLog } from "../util/rate-log.js";
import type { BadEvent, DecodedBatch, KvEventBatch } from "./types.js";

/** What a sink reports for one frame it applied itself (the index's FrameResult satisfies it). */
export interface FrameVerdict {
  ok: boolean;
  error: string | null;
  /** The batch's publish time (seconds), as decoded. */
  ts: number;
  events: number;
  clearedEvents: number;
  storedBlocks: number;
  removedBlocks: number;
  badEvents: number;
  bad: BadEvent[];
  /** The frame's events, when they were asked for and the sink decoded them (null: refused). */
  decoded?: DecodedBatch | null;
}

/** Where batches go (the index implements this through `indexSink`). */
export interface EventSink {
  /**
   * The hot path: the sink decodes and applies the payload itself, in one call. With
   * `withEvents` (someone listens for batches) it may hand the decoded events back in the
   * verdict, so that the payload is decoded once.
   */
  applyFrame?(worker: string, payload: Uint8Array, seq: bigint, withEvents?: boolean): FrameVerdict;
  /** Decoded events, for sinks without applyFrame. */
  applyBatch?(worker: string, batch: KvEventBatch, seq: bigint): void;
  /** The worker restarted: forget everything it had. */
  resetWorker(worker: string): void;
}

export interface ConsumerOptions {
  /** PUB endpoint of the worker, e.g. tcp://10.0.0.5:5557. */
  endpoint: string;
  /** Name of the worker in the index, metrics and logs. Defaults to the endpoint. */
  worker?: string;
  /** Topic prefix to subscribe to (SGLang's default topic is ""). */
  topic?: string;
  /** ROUTER replay endpoint of the worker, if it has one. */
  replayEndpoint?: string;
  /** How long to wait for a replay to finish before giving up on it (ms). Default 2000. */
  replayTimeoutMs?: number;
  /** Ask the replay socket for everything it still holds when the first batch shows seq > 0. */
  catchUp?: boolean;
  sink?: EventSink;
  log?: (line: string) => void;
  /** At most one problem line per worker per this many ms (the rest are counted). Default 2000. */
  logIntervalMs?: number;
  /**
   * Messages ZMQ may queue for us before it stops reading the connection (the publisher then drops
   * what it cannot send, which the seq numbers reveal). Default 1000.
   */
  receiveHighWaterMark?: number;
  /** Live messages held back during a replay before reading pauses until it ends. Default 10000. */
  maxHeldBack?: number;
  /** Largest message part ZMQ takes (ZMQ_MAXMSGSIZE); a larger one drops the connection unread. Default 64 MiB. */
  maxMessageBytes?: number;
}

/** The index refuses a larger frame anyway: ZMQ refuses it before buffering it. */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Distinct problem kinds counted per consumer before the rest go to "other". */
const MAX_PROBLEM_KINDS = 64;

export interface ConsumerMetrics {
  frames: number;
  batches: number;
  events: number;
  blocksStored: number;
  blocksRemoved: number;
  cleared: number;
  gaps: number;
  missedBatches: number;
  duplicates: number;
  restarts: number;
  replays: number;
  replayedBatches: number;
  replayFailures: number;
  unrecoveredBatches: number;
  badFrames: number;
  badBatches: number;
  badEvents: number;
  /** Messages ZMQ refused unread (over the size cap, or bad framing), each costing a reconnect. */
  refusedMessages: number;
  /** Every problem counted by kind ("bad event: event is nil", "batches dropped (seq gap)", ...). */
  problems: Record<string, number>;
}

export interface ConsumerEvents {
  batch: [
    {
      worker: string;
      seq: bigint;
      batch: KvEventBatch;
      form: DecodedBatch["form"];
      replayed: boolean;
    },
  ];
  gap: [{ worker: string; expected: bigint; got: bigint; missing: bigint }];
  duplicate: [{ worker: string; seq: bigint; expected: bigint }];
  restart: [{ worker: string; seq: bigint; expected: bigint }];
  replay: [
    {
      worker: string;
      from: bigint;
      received: number;
      ok: boolean;
      unrecovered: bigint;
      reason?: string;
    },
  ];
  bad: [{ worker: string; seq: bigint | null; reason: string }];
  refused: [{ worker: string; address: string }];
  error: [Error];
}

function newMetrics(): ConsumerMetrics {
  return {
    frames: 0,
    batches: 0,
    events: 0,
    blocksStored: 0,
    blocksRemoved: 0,
    cleared: 0,
    gaps: 0,
    missedBatches: 0,
    duplicates: 0,
    restarts: 0,
    replays: 0,
    replayedBatches: 0,
    replayFailures: 0,
    unrecoveredBatches: 0,
    badFrames: 0,
    badBatches: 0,
    badEvents: 0,
    refusedMessages: 0,
    problems: {},
  };
}

function decodeOrNull(payload: Uint8Array): DecodedBatch | null {
  try {
    return decodeBatch(payload);
  } catch (e) {
    if (!(e instanceof BatchDecodeError)) throw e;
    return null;
  }
}

/** How long after a dropped connection ZMQ's own retry must show before the consumer reconnects itself. */
const RETRY_GRACE_MS = 250;

/** How long the receive loop may run before letting timers and I/O in. */
const YIELD_EVERY_MS = 10;

export class KvEventConsumer extends EventEmitter<ConsumerEvents> {
  readonly worker: string;
  readonly metrics: ConsumerMetrics = newMetrics();
  readonly seq = new SeqTracker();
  private readonly opts: ConsumerOptions;
  private readonly log: (line: string) => void;
  private readonly problemLog: RateLimitedLog;
  private sub: Subscriber | null = null;
  private dealer: Dealer | null = null;
  private replaying = false;
  /** The publish time of the last batch applied (null before one). */
  private lastTs: number | null = null;
  private pending: Buffer[][] = [];
  private running = false;
  private loop: Promise<void> | null = null;
  private replayDone: Promise<void> = Promise.resolve();

  constructor(opts: ConsumerOptions) {
    super();
    this.opts = opts;
    this.worker = opts.worker ?? opts.endpoint;
    this.log = opts.log ?? ((line) => console.error(line));
    this.problemLog = new RateLimitedLog({ write: this.log, intervalMs: opts.logIntervalMs });
  }

  /** Connects and starts consuming in the background. */
  async start(): Promise<void> {
    this.running = true;
    this.listen(this.openSocket());
  }

  private listen(sub: Subscriber): void {
    this.sub = sub;
    this.loop = this.run(sub);
  }

  private openSocket(): Subscriber {
    const maxMessageSize = this.opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const sub = new Subscriber({
      linger: 0,
      receiveHighWaterMark: this.opts.receiveHighWaterMark ?? 1000,
      maxMessageSize,
    });
    // A connection ZMQ will retry (the publisher went away) is followed at once by connect:retry;
    // one it gave up on (a message over the size cap is a protocol error to ZMQ) is not.
    let givenUp: NodeJS.Timeout | null = null;
    sub.events.on("disconnect", (e) => {
      givenUp = setTimeout(() => this.refused(sub, e.address, maxMessageSize), RETRY_GRACE_MS);
      givenUp.unref();
    });
    sub.events.on("connect:retry", () => {
      if (givenUp) clearTimeout(givenUp);
      givenUp = null;
    });
    sub.connect(this.opts.endpoint);
    sub.subscribe(this.opts.topic ?? "");
    return sub;
  }

  /** ZMQ refused a message and dropped its connection for good: counted, logged, a fresh socket. */
  private refused(old: Subscriber, address: string, maxMessageSize: number): void {
    if (!this.running || this.sub !== old) return;
    this.metrics.refusedMessages++;
    this.problem(
      "message refused by ZMQ",
      `${address}: a message over ${maxMessageSize} bytes (or bad framing) was dropped unread with its connection; reconnected`,
    );
    this.emit("refused", { worker: this.worker, address });
    this.listen(this.openSocket());
    old.close();
  }

  async close(): Promise<void> {
    this.running = false;
    this.sub?.close();
    this.dealer?.close();
    await this.loop?.catch(() => undefined);
    await this.replayDone.catch(() => undefined);
    this.problemLog.flush();
  }

  /** Resolves once any replay in progress has finished and its held-back batches applied. */
  async settled(): Promise<void> {
    while (this.replaying) await this.replayDone;
  }

  private async run(sub: Subscriber): Promise<void> {
    try {
      const maxHeld = this.opts.maxHeldBack ?? 10_000;
      let yieldAt = Date.now() + YIELD_EVERY_MS;
      for await (const frames of sub) {
        if (!this.running) break;
        this.onFrames(frames);
        // Stop reading while a replay holds back too much: ZMQ's queue (bounded) fills instead.
        while (this.replaying && this.pending.length >= maxHeld && this.running)
          await this.replayDone;
        // Queued messages arrive as already-resolved promises: without this, a flood would keep
        // timers (a tool's periodic output) and I/O from ever running.
        if (Date.now() >= yieldAt) {
          await new Promise<void>((r) => setImmediate(r));
          yieldAt = Date.now() + YIELD_EVERY_MS;
        }
      }
    } catch (err) {
      if (this.running && this.sub === sub) this.emit("error", err as Error);
    }
  }

  /** Handles one live multipart message (public for tests that feed frames directly). */
  onFrames(frames: Buffer[]): void {
    this.metrics.frames++;
    if (this.replaying) {
      this.pending.push(frames);
      return;
    }
    this.handle(frames, false);
  }

  /** Counts `n` problems of `kind` and logs them, at most one line per worker per interval. */
  private problem(kind: string, detail: string, n = 1): void {
    const p = this.metrics.problems;
    const k = kind in p || Object.keys(p).length < MAX_PROBLEM_KINDS ? kind : "other";
    p[k] = (p[k] ?? 0) + n;
    this.problemLog.note(`kv-events: worker ${this.worker}`, kind, detail, n);
  }

  private bad(
    kind: "badFrames" | "badBatches" | "badEvents",
    seq: bigint | null,
    reason: string,
    what = reason,
  ): void {
    this.metrics[kind]++;
    const label =
      kind === "badFrames" ? "bad message" : kind === "badBatches" ? "bad batch" : "bad event";
    this.problem(
      `${label}: ${what.length > 80 ? `${what.slice(0, 77)}...` : what}`,
      `seq ${seq ?? "?"}: ${reason} (skipped)`,
    );
    this.emit("bad", { worker: this.worker, seq, reason });
  }

  /** A batch's refused events: counted and logged per reason (a batch may hold a million). */
  private badEvents(seq: bigint, n: number, bad: readonly BadEvent[]): void {
    if (n === 0) return;
    this.metrics.badEvents += n;
    if (n > bad.length)
      this.problem(
        "bad event: not itemised",
        `seq ${seq}: ${n - bad.length} more (skipped)`,
        n - bad.length,
      );
    const byReason = new Map<string, { n: number; last: BadEvent }>();
    for (const b of bad) {
      const key = byReason.has(b.reason) || byReason.size < MAX_PROBLEM_KINDS ? b.reason : "other";
      const r = byReason.get(key);
      if (r) {
        r.n++;
        r.last = b;
      } else byReason.set(key, { n: 1, last: b });
    }
    for (const [reason, { n, last }] of byReason) {
      const what = reason.length > 80 ? `${reason.slice(0, 77)}...` : reason;
      this.problem(
        `bad event: ${what}`,
        `seq ${seq}: event ${last.index}: ${last.reason} (skipped)`,
        n,
      );
    }
    if (this.listenerCount("bad") > 0) {
      for (const b of bad)
        this.emit("bad", { worker: this.worker, seq, reason: `event ${b.index}: ${b.reason}` });
    }
  }

  private handle(frames: Buffer[], replayed: boolean): void {
    const seq = this.seqOf(frames);
    if (seq === null) return;
    if (!this.admit(this.classify(seq, frames[2], replayed), seq, frames, replayed)) return;
    this.seq.accept(seq);
    this.applyPayload(seq, frames[2], replayed);
  }

  /** The message's seq, or null (counted and reported) when its frames are malformed. */
  private seqOf(frames: Buffer[]): bigint | null {
    if (frames.length !== 3) {
      this.bad(
        "badFrames",
        null,
        `message has ${frames.length} frames, expected 3 [topic, seq, payload]`,
        "wrong frame count",
      );
      return null;
    }
    let seq: bigint;
    try {
      seq = decodeSeq(frames[1]);
    } catch (e) {
      this.bad("badFrames", null, (e as Error).message, "bad seq frame");
      return null;
    }
    if (seq < 0n) {
      this.bad("badFrames", seq, "negative seq outside a replay");
      return null;
    }
    return seq;
  }

  /** Acts on the seq's verdict; false when the batch is not applied now (a duplicate, or a replay takes over). */
  private admit(v: SeqVerdict, seq: bigint, frames: Buffer[], replayed: boolean): boolean {
    switch (v.kind) {
      case "duplicate":
        if (!replayed) {
          this.metrics.duplicates++;
          this.problem(
            "duplicate batch dropped",
            `seq ${seq}: duplicate (expected ${v.expected}), dropped`,
          );
          this.emit("duplicate", { worker: this.worker, seq, expected: v.expected });
        }
        return false;
      case "restart":
        this.metrics.restarts++;
        this.problem(
          "publisher restart",
          `seq ${seq}: publisher restarted (expected ${v.expected}); cleared its blocks`,
        );
        this.emit("restart", { worker: this.worker, seq, expected: v.expected });
        this.opts.sink?.resetWorker(this.worker);
        return true;
      case "gap":
        return this.onGap(v, seq, frames, replayed);
      case "first":
        if (!replayed && seq > 0n && this.opts.catchUp && this.opts.replayEndpoint) {
          this.startReplay(0n, frames);
          return false;
        }
        return true;
      case "next":
        return true;
    }
  }

  /** Batches missed: counted, reported, and asked of the replay socket when there is one. */
  private onGap(
    v: Extract<SeqVerdict, { kind: "gap" }>,
    seq: bigint,
    frames: Buffer[],
    replayed: boolean,
  ): boolean {
    if (replayed) {
      // The replay buffer no longer holds what we missed.
      this.metrics.unrecoveredBatches += Number(v.missing);
      return true;
    }
    this.metrics.gaps++;
    this.metrics.missedBatches += Number(v.missing);
    this.problem(
      "batches dropped (seq gap)",
      `seq ${seq}: gap, ${v.missing} batch(es) missing from ${v.expected}`,
      Number(v.missing),
    );
    this.emit("gap", { worker: this.worker, expected: v.expected, got: seq, missing: v.missing });
    if (this.opts.replayEndpoint) {
      this.startReplay(v.expected, frames);
      return false;
    }
    this.metrics.unrecoveredBatches += Number(v.missing);
    return true;
  }

  /**
   * The seq's verdict. SGLang stamps each batch with time.time() when it builds it, so within one
   * process a later batch never has an earlier ts: a live batch numbered below the expected one
   * but stamped later than every batch seen is a new process's (its sequence started over, its
   * first batches were missed). Only such a batch is decoded here, for its ts; the rest are
   * decoded once, when applied.
   */
  private classify(seq: bigint, payload: Buffer, replayed: boolean): SeqVerdict {
    const v = this.seq.classify(seq);
    if (v.kind !== "duplicate" || replayed) return v;
    const ts = batchTs(payload);
    return ts !== null && this.lastTs !== null && ts > this.lastTs
      ? { kind: "restart", expected: v.expected }
      : v;
  }

  private applyPayload(seq: bigint, payload: Buffer, replayed: boolean): void {
    const sink = this.opts.sink;
    const m = this.metrics;
    // Per-event objects only when someone listens for them (tools, debugging): not the hot path.
    const listened = this.listenerCount("batch") > 0;
    let decoded: DecodedBatch | null = null;
    if (!sink?.applyFrame) {
      try {
        decoded = decodeBatch(payload);
      } catch (e) {
        if (!(e instanceof BatchDecodeError)) throw e;
        this.bad("badBatches", seq, e.message);
        return;
      }
    }
    if (sink?.applyFrame) {
      const v = sink.applyFrame(this.worker, payload, seq, listened);
      if (!v.ok) {
        this.bad("badBatches", seq, v.error ?? "batch refused");
        return;
      }
      this.lastTs = v.ts;
      // A sink that did not hand the events back: decoded apart for the listeners.
      if (listened) decoded = v.decoded !== undefined ? v.decoded : decodeOrNull(payload);
      m.events += v.events;
      m.blocksStored += v.storedBlocks;
      m.blocksRemoved += v.removedBlocks;
      m.cleared += v.clearedEvents;
      this.badEvents(seq, v.badEvents, v.bad);
    } else if (decoded) {
      this.lastTs = decoded.batch.ts;
      for (const e of decoded.batch.events) {
        m.events++;
        if (e.type === "BlockStored") m.blocksStored += e.blockHashes.length;
        else if (e.type === "BlockRemoved") m.blocksRemoved += e.blockHashes.length;
        else m.cleared++;
      }
      this.badEvents(seq, decoded.bad.length, decoded.bad);
      sink?.applyBatch?.(this.worker, decoded.batch, seq);
    }
    m.batches++;
    if (replayed) m.replayedBatches++;
    if (decoded)
      this.emit("batch", {
        worker: this.worker,
        seq,
        batch: decoded.batch,
        form: decoded.form,
        replayed,
      });
  }

  private startReplay(from: bigint, trigger: Buffer[]): void {
    this.replaying = true;
    this.pending.unshift(trigger);
    this.metrics.replays++;
    this.replayDone = this.replay(from).then(
      (r) => this.finishReplay(from, r.frames, r.ok, r.reason),
      (err) => this.finishReplay(from, [], false, (err as Error).message),
    );
  }

  private async replay(
    from: bigint,
  ): Promise<{ frames: Buffer[][]; ok: boolean; reason?: string }> {
    if (!this.dealer) {
      // The replay answers with batches too: the same cap (a refused one ends the replay as failed).
      this.dealer = new Dealer({
        linger: 0,
        receiveTimeout: this.opts.replayTimeoutMs ?? 2000,
        maxMessageSize: this.opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
      });
      this.dealer.connect(this.opts.replayEndpoint as string);
    }
    const dealer = this.dealer;
    await dealer.send([Buffer.alloc(0), encodeSeq(from)]);
    const got: Buffer[][] = [];
    for (;;) {
      let msg: Buffer[];
      try {
        msg = await dealer.receive();
      } catch (e) {
        // Timed out (or closed): drop this dealer so a late answer cannot be read as the next one.
        dealer.close();
        this.dealer = null;
        return { frames: got, ok: false, reason: (e as Error).message };
      }
      // SGLang: ["", topic, seq, payload]; vLLM: ["", seq, payload]. END: seq == -1.
      const body = msg[0]?.length === 0 ? msg.slice(1) : msg;
      const frames = body.length === 2 ? [Buffer.alloc(0), body[0], body[1]] : body;
      if (frames.length !== 3 || frames[1].length !== 8) {
        this.bad(
          "badFrames",
          null,
          `replay reply has ${msg.length} frames`,
          "replay reply with wrong frames",
        );
        continue;
      }
      if (decodeSeq(frames[1]) === END_SEQ) return { frames: got, ok: true };
      got.push(frames);
    }
  }

  private finishReplay(from: bigint, frames: Buffer[][], ok: boolean, reason?: string): void {
    const before = this.metrics.unrecoveredBatches;
    for (const f of frames) this.handle(f, true);
    const pending = this.pending;
    this.pending = [];
    this.replaying = false;
    // The batch that revealed the gap comes first in `pending`; anything still missing before it
    // is lost for good (the replay buffer had rolled past it, or the replay failed).
    if (!ok) this.metrics.replayFailures++;
    const first = pending[0];
    if (first && first.length === 3 && first[1].length === 8) {
      const s = decodeSeq(first[1]);
      if (this.seq.expected !== null && s > this.seq.expected) {
        this.metrics.unrecoveredBatches += Number(s - this.seq.expected);
        this.seq.accept(s - 1n);
      }
    }
    const unrecovered = BigInt(this.metrics.unrecoveredBatches - before);
    this.problemLog.note(
      `kv-events: worker ${this.worker}`,
      ok ? "replays" : "failed replays",
      `replay from ${from} ${ok ? "done" : `failed (${reason})`}, ${frames.length} batch(es) received, ${unrecovered} unrecovered`,
    );
    this.emit("replay", {
      worker: this.worker,
      from,
      received: frames.length,
      ok,
      unrecovered,
      reason,
    });
    while (pending.length > 0) {
      const next = pending.shift() as Buffer[];
      if (this.replaying) {
        this.pending.push(next);
        continue;
      }
      // Live copies of batches the replay already delivered are not wire duplicates: drop quietly.
      if (next.length === 3 && next[1].length === 8 && this.seq.expected !== null) {
        const s = decodeSeq(next[1]);
        if (s >= 0n && s < this.seq.expected && this.seq.classify(s).kind === "duplicate") continue;
      }
      this.handle(next, false);
    }
  }
}
