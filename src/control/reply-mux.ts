// Request/reply for the publisher, for `send` (first reply) and `broadcast` (every reply until a
// deadline) alike: one wildcard inbox subscription under the inbox prefix the caller names,
// replies matched to callers by the last inbox token. nats.js's own `request()` does the same, but on every SUCCESSFUL request
// it also builds a `RequestError("cancelled")` with a stack trace (RequestOne.cancel) plus a
// deferred and a timer wrapper, a large share of a loopback round trip (bench:control measures it).
// Failures come back as nats.js's own error classes: TimeoutError, NoRespondersError (bare, not
// wrapped in a RequestError as `request()` does), and RequestError for everything else.
import {
  createInbox,
  type Msg,
  type NatsConnection,
  NoRespondersError,
  RequestError,
  type Subscription,
  TimeoutError,
} from "@nats-io/transport-node";

interface Pending {
  /** Takes one reply; true when the caller wants no more. */
  deliver: (m: Msg) => boolean;
  /** The deadline passed. */
  expire: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

export interface ReplyMuxOptions {
  /**
   * Prefix of the reply inboxes (default `_INBOX`). Accounts that restrict subscriptions grant
   * the router one prefix (say `_KVCTL_ROUTER`); replies come back under it.
   */
  inboxPrefix?: string;
}

export class ReplyMux {
  private readonly base: string;
  private readonly pending = new Map<string, Pending>();
  private sub: Subscription | null = null;
  private seq = 0;

  constructor(
    private readonly nc: NatsConnection,
    opts: ReplyMuxOptions = {},
  ) {
    this.base = `${createInbox(opts.inboxPrefix)}.`;
    // A closed connection answers nothing more: fail what is still waiting, now.
    // (nats.js resolves closed() with the Error that closed it, if one did.)
    const closedBy = (e: unknown) =>
      this.failAll(
        e
          ? new RequestError(`connection closed: ${e instanceof Error ? e.message : String(e)}`, {
              cause: e,
            })
          : new RequestError("connection closed"),
      );
    nc.closed().then(closedBy, closedBy);
  }

  /** Requests awaiting a reply right now. */
  get size(): number {
    return this.pending.size;
  }

  /** Publishes `data` on `subject` with a fresh reply token; resolves with the first reply. */
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Msg> {
    return new Promise<Msg>((resolve, reject) => {
      const deliver = (m: Msg) => {
        if (isNoResponders(m)) reject(new NoRespondersError(subject));
        else resolve(m);
        return true;
      };
      this.start(subject, data, timeoutMs, {
        deliver,
        expire: () => reject(new TimeoutError()),
        reject,
      });
    });
  }

  /**
   * Publishes `data` on `subject` with a fresh reply token and hands every reply to `onReply`
   * until it returns true or `deadlineMs` passes; resolves then. Rejects at once when the inbox
   * subscription is refused, the connection closes or the publish fails.
   */
  collect(
    subject: string,
    data: Uint8Array,
    deadlineMs: number,
    onReply: (m: Msg) => boolean,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const deliver = (m: Msg) => {
        const done = onReply(m);
        if (done) resolve();
        return done;
      };
      this.start(subject, data, deadlineMs, { deliver, expire: resolve, reject });
    });
  }

  private start(
    subject: string,
    data: Uint8Array,
    timeoutMs: number,
    p: Omit<Pending, "timer">,
  ): void {
    if (this.nc.isClosed()) return p.reject(new RequestError("connection closed"));
    this.subscribe();
    const token = (this.seq++).toString(36);
    const timer = setTimeout(() => {
      if (this.pending.delete(token)) p.expire();
    }, timeoutMs);
    this.pending.set(token, { ...p, timer });
    try {
      this.nc.publish(subject, data, { reply: this.base + token });
    } catch (e) {
      clearTimeout(timer);
      this.pending.delete(token);
      p.reject(e instanceof Error ? e : new RequestError(String(e)));
    }
  }

  /** Stops listening; anything still waiting fails. */
  close(): void {
    this.sub?.unsubscribe();
    this.sub = null;
    this.failAll(new RequestError("reply mux closed"));
  }

  /** (Re)subscribes when there is no live subscription (first use, or after a permissions error). */
  private subscribe(): void {
    if (this.sub && !this.sub.isClosed()) return;
    this.sub = this.nc.subscribe(`${this.base}*`, {
      callback: (err, msg) => this.onReply(err, msg),
    });
  }

  private onReply(err: Error | null, msg: Msg): void {
    if (err) {
      // A subscription error (say, no permission on the inbox) is terminal for it: every waiter
      // fails with the reason, and the next request subscribes again.
      this.sub = null;
      for (const p of this.drain()) p.reject(new RequestError(err.message, { cause: err }));
      return;
    }
    const token = msg.subject.slice(this.base.length);
    const p = this.pending.get(token);
    if (!p) return; // late reply to a request that already timed out
    if (!p.deliver(msg)) return; // a collector waiting for more
    this.pending.delete(token);
    clearTimeout(p.timer);
  }

  private failAll(e: Error): void {
    for (const p of this.drain()) p.reject(e);
  }

  private drain(): Pending[] {
    const all = [...this.pending.values()];
    for (const p of all) clearTimeout(p.timer);
    this.pending.clear();
    return all;
  }
}

/** A 503 status with no body: the server saying nobody is subscribed on the request's subject. */
export function isNoResponders(msg: Msg): boolean {
  return msg.data.length === 0 && msg.headers?.code === 503;
}
