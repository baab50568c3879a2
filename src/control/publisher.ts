// The router's side of the command plane: validates a command, wraps it in an envelope with a
// UUIDv7 idempotency id, and sends it over NATS core request/reply.
//   send()      one worker, one ack; retries with backoff reuse the id (the worker dedupes).
//   broadcast() every worker on the broadcast subject; one ack each until a deadline, names the
//               expected workers that stayed silent.
//   publish()   fire-and-forget (no reply subject): still applied and counted by the worker.
// Validation and encoding happen once per command, never per retry.
import {
  type Msg,
  type NatsConnection,
  NoRespondersError as NatsNoRespondersError,
  TimeoutError,
} from "@nats-io/transport-node";
import {
  type Ack,
  AckDecodeError,
  broadcastSubject,
  type Command,
  CommandValidationError,
  DEFAULT_SUBJECT_PREFIX,
  decodeAck,
  encodeEnvelopeBytes,
  makeEnvelope,
  uuidv7,
  validateCommand,
  workerSubject,
} from "../protocol/index.js";
import { backoffDelay, sleep } from "./backoff.js";
import { type ControlCounters, newCounters } from "./counters.js";
import {
  AckTimeoutError,
  DeliveryError,
  InvalidAckError,
  NoRespondersError,
  WindowFullError,
} from "./errors.js";
import { InFlightWindow } from "./in-flight-window.js";
import { isNoResponders, ReplyMux } from "./reply-mux.js";

export interface PublisherOptions {
  /** Subject prefix (default `kv-control`). */
  subjectPrefix?: string;
  /** Time to wait for one attempt's ack (ms, default 1000). */
  timeoutMs?: number;
  /** Re-sends after a timeout or no-responders (default 2, so 3 attempts). */
  retries?: number;
  /** First retry delay (ms, default 50), doubled each retry up to maxBackoffMs (default 1000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Commands awaiting acks at once (default 1024). */
  maxInFlight?: number;
  /** Callers allowed to wait for a slot before sends are refused locally (default 65 536). */
  maxQueued?: number;
  /** The workers a broadcast expects to hear from (can be overridden per broadcast). */
  workers?: readonly string[];
  /**
   * Prefix of the reply inboxes for acks (default `_INBOX`), for `send` and `broadcast` alike.
   * Accounts that restrict subscriptions grant the router one (say `_KVCTL_ROUTER`).
   */
  inboxPrefix?: string;
}

export interface SendOptions {
  timeoutMs?: number;
  retries?: number;
  /** Reuse a known idempotency id (re-issuing a command from an earlier process, say). */
  id?: string;
}

export interface BroadcastOptions {
  /** How long to collect acks (ms, default the publisher's timeoutMs). */
  deadlineMs?: number;
  /** Expected workers; defaults to the publisher's `workers`. Without any, waits the full deadline. */
  workers?: readonly string[];
  id?: string;
}

export interface BroadcastResult {
  id: string;
  /** One ack per answering worker (the first one it sent), in arrival order. */
  acks: Ack[];
  /** Expected workers that did not answer before the deadline. */
  silent: string[];
  /** Workers that answered but were not in the expected set. */
  unexpected: string[];
  /** True when the server reported no subscriber at all on the broadcast subject. */
  noResponders: boolean;
  /** Replies that were not valid acks for this command. */
  invalidReplies: number;
}

export type PublishTarget = string | { broadcast: true };

export class ControlPublisher {
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoff: { baseMs: number; maxMs: number };
  private readonly window: InFlightWindow;
  private readonly workers: readonly string[] | undefined;
  private readonly stats: ControlCounters = newCounters();
  private readonly subjects = new Map<string, string>();
  private readonly inboxPrefix: string | undefined;
  /** Created on the first send or broadcast, so a publisher that only publishes never subscribes. */
  private mux: ReplyMux | null = null;

  constructor(
    private readonly nc: NatsConnection,
    opts: PublisherOptions = {},
  ) {
    this.prefix = opts.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    broadcastSubject(this.prefix); // fail fast on a bad prefix
    this.timeoutMs = opts.timeoutMs ?? 1000;
    this.retries = opts.retries ?? 2;
    this.backoff = { baseMs: opts.backoffMs ?? 50, maxMs: opts.maxBackoffMs ?? 1000 };
    this.window = new InFlightWindow(opts.maxInFlight ?? 1024, opts.maxQueued ?? 65_536);
    this.workers = opts.workers;
    this.inboxPrefix = opts.inboxPrefix;
  }

  /** A snapshot of the counters. */
  get counters(): ControlCounters {
    return { ...this.stats, acked: { ...this.stats.acked } };
  }

  /** Commands awaiting acks / callers waiting for a slot right now. */
  get inFlight(): { active: number; queued: number } {
    return { active: this.window.inFlight, queued: this.window.queued };
  }

  /**
   * Sends one command to one worker and resolves with its ack (whatever its status: a `rejected`
   * ack is an answer, not an exception). Throws CommandValidationError (before sending),
   * WindowFullError, NoRespondersError, AckTimeoutError, InvalidAckError or DeliveryError.
   */
  async send(workerId: string, cmd: Command, opts: SendOptions = {}): Promise<Ack> {
    const subject = this.subjectOf(workerId);
    const { id, bytes } = this.prepare(cmd, opts.id);
    const slot = this.acquire(id, workerId);
    if (slot) await slot;
    try {
      return await this.requestWithRetries(
        subject,
        workerId,
        id,
        bytes,
        opts.timeoutMs ?? this.timeoutMs,
        opts.retries ?? this.retries,
      );
    } finally {
      this.window.release();
    }
  }

  /**
   * Sends one command on the broadcast subject and collects one ack per worker until the
   * deadline, or until every expected worker has answered.
   */
  async broadcast(cmd: Command, opts: BroadcastOptions = {}): Promise<BroadcastResult> {
    const subject = broadcastSubject(this.prefix);
    const { id, bytes } = this.prepare(cmd, opts.id);
    const expected = opts.workers ?? this.workers;
    const slot = this.acquire(id, null);
    if (slot) await slot;
    try {
      this.stats.sent++;
      return await this.collect(subject, id, bytes, opts.deadlineMs ?? this.timeoutMs, expected);
    } finally {
      this.window.release();
    }
  }

  /** Stops listening for acks (a router dropping this publisher but keeping the connection). */
  close(): void {
    this.mux?.close();
    this.mux = null;
  }

  /** Fire-and-forget: no reply subject, no ack. Returns the idempotency id. */
  publish(target: PublishTarget, cmd: Command, opts: { id?: string } = {}): string {
    const subject =
      typeof target === "string" ? this.subjectOf(target) : broadcastSubject(this.prefix);
    const { id, bytes } = this.prepare(cmd, opts.id);
    try {
      this.nc.publish(subject, bytes);
    } catch (e) {
      this.stats.failed++;
      throw new DeliveryError(
        `publish failed: ${errorText(e)}`,
        id,
        typeof target === "string" ? target : null,
        0,
        { cause: e },
      );
    }
    this.stats.sent++;
    this.stats.published++;
    return id;
  }

  /** Validates and encodes once; the same bytes (same id) go out on every retry. */
  private prepare(cmd: Command, id?: string): { id: string; bytes: Uint8Array } {
    let valid: Command;
    try {
      valid = validateCommand(cmd);
    } catch (e) {
      if (e instanceof CommandValidationError) this.stats.rejectedLocally++;
      throw e;
    }
    const env = makeEnvelope(valid, id ?? uuidv7());
    return { id: env.id, bytes: encodeEnvelopeBytes(env) };
  }

  /** Null when a slot is held already (no await on the hot path), else a promise of one. */
  private acquire(id: string, workerId: string | null): Promise<void> | null {
    const slot = this.window.tryAcquire();
    if (slot === false) {
      this.stats.rejectedLocally++;
      throw new WindowFullError(
        `in-flight window full (${this.window.inFlight} in flight, ${this.window.queued} queued)`,
        id,
        workerId,
        0,
      );
    }
    return slot === true ? null : slot;
  }

  /** Worker subjects are checked once and remembered (a router talks to a fixed fleet). */
  private subjectOf(workerId: string): string {
    let subject = this.subjects.get(workerId);
    if (subject === undefined) {
      subject = workerSubject(workerId, this.prefix);
      if (this.subjects.size >= 65_536) this.subjects.clear();
      this.subjects.set(workerId, subject);
    }
    return subject;
  }

  private async requestWithRetries(
    subject: string,
    workerId: string,
    id: string,
    bytes: Uint8Array,
    timeoutMs: number,
    retries: number,
  ): Promise<Ack> {
    for (let attempt = 1; ; attempt++) {
      if (attempt === 1) this.stats.sent++;
      else {
        this.stats.retried++;
        await sleep(backoffDelay(attempt - 1, this.backoff));
      }
      let msg: Msg;
      try {
        msg = await this.replies().request(subject, bytes, timeoutMs);
      } catch (e) {
        const kind = classify(e);
        if (kind !== "other" && attempt <= retries) continue;
        if (kind === "no-responders") {
          this.stats.noResponders++;
          throw new NoRespondersError(
            `no responders on ${subject} (worker ${workerId} is not subscribed) after ${attempt} attempt(s)`,
            id,
            workerId,
            attempt,
            { cause: e },
          );
        }
        if (kind === "timeout") {
          this.stats.timedOut++;
          throw new AckTimeoutError(
            `no ack from worker ${workerId} within ${timeoutMs} ms after ${attempt} attempt(s)`,
            id,
            workerId,
            attempt,
            { cause: e },
          );
        }
        this.stats.failed++;
        throw new DeliveryError(
          `request to ${subject} failed: ${errorText(e)}`,
          id,
          workerId,
          attempt,
          { cause: e },
        );
      }
      return this.readAck(msg, id, workerId, attempt);
    }
  }

  private readAck(msg: Msg, id: string, workerId: string, attempt: number): Ack {
    let ack: Ack;
    try {
      ack = decodeAck(msg.data);
    } catch (e) {
      this.stats.invalidAcks++;
      throw new InvalidAckError(
        e instanceof AckDecodeError ? e.message : errorText(e),
        id,
        workerId,
        attempt,
        { cause: e },
      );
    }
    if (ack.id !== id) {
      this.stats.invalidAcks++;
      throw new InvalidAckError(
        `ack carries id ${JSON.stringify(ack.id)}, expected ${id}`,
        id,
        workerId,
        attempt,
      );
    }
    this.stats.acked[ack.status]++;
    return ack;
  }

  /** The one reply mux of this publisher (acks of sends and broadcasts). */
  private replies(): ReplyMux {
    return (this.mux ??= new ReplyMux(this.nc, { inboxPrefix: this.inboxPrefix }));
  }

  private async collect(
    subject: string,
    id: string,
    bytes: Uint8Array,
    deadlineMs: number,
    expected: readonly string[] | undefined,
  ): Promise<BroadcastResult> {
    const byWorker = new Map<string, Ack>();
    const want = expected ? new Set(expected) : null;
    let invalidReplies = 0;
    let noResponders = false;
    const onReply = (msg: Msg): boolean => {
      if (isNoResponders(msg)) {
        noResponders = true;
        return true;
      }
      let ack: Ack;
      try {
        ack = decodeAck(msg.data);
      } catch {
        invalidReplies++;
        this.stats.invalidAcks++;
        return false;
      }
      if (ack.id !== id) {
        invalidReplies++;
        this.stats.invalidAcks++;
        return false;
      }
      if (byWorker.has(ack.worker_id)) return false;
      byWorker.set(ack.worker_id, ack);
      this.stats.acked[ack.status]++;
      return want !== null && byWorker.size >= want.size && [...want].every((w) => byWorker.has(w));
    };
    try {
      await this.replies().collect(subject, bytes, deadlineMs, onReply);
    } catch (e) {
      this.stats.failed++;
      throw new DeliveryError(`broadcast on ${subject} failed: ${errorText(e)}`, id, null, 1, {
        cause: e,
      });
    }
    const acks = [...byWorker.values()];
    const silent = want ? [...want].filter((w) => !byWorker.has(w)) : [];
    const unexpected = want ? acks.map((a) => a.worker_id).filter((w) => !want.has(w)) : [];
    this.stats.silentWorkers += silent.length;
    if (noResponders) this.stats.noResponders++;
    return { id, acks, silent, unexpected, noResponders, invalidReplies };
  }
}

/** What the reply mux failed with: the two kinds a retry can help, or anything else. */
function classify(e: unknown): "no-responders" | "timeout" | "other" {
  if (e instanceof NatsNoRespondersError) return "no-responders";
  if (e instanceof TimeoutError) return "timeout";
  return "other";
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
