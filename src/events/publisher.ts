// KvEventPublisher: the SGLang publisher's wire, for custom engines that want kvctl's consumer
// (or Dynamo's, or llm-d's) to index their caches. Frames [topic, seq (8-byte BE), payload], seq
// 0, 1, 2, ... per publisher, payload byte-identical to SGLang 0.5.23's msgspec encoding
// (encode.ts), and an optional ROUTER replay socket answering [client, "", start_seq] with
// [client, "", topic, seq, payload] per buffered batch and [client, "", "", END_SEQ, ""] at the end,
// from a bounded buffer of the last `bufferSteps` batches. The socket is an XPUB (same frames as
// a PUB) so `waitForSubscribers` can tell when a subscriber has joined: ZMQ drops what is sent
// before a subscription arrives, and a PUB cannot see that moment.
import { Router, XPublisher } from "zeromq";
import { decodeSeq, encodeSeq, END_SEQ } from "./decode.js";
import { encodeBatch } from "./encode.js";
import type { KvEvent, KvEventBatch } from "./types.js";
import { tierOfMedium } from "./types.js";

export interface PublisherOptions {
  /** PUB endpoint to bind, e.g. tcp://*:5557 (or tcp://127.0.0.1:0 for an ephemeral port). */
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
  /** How many past batches the replay socket can serve. Default 10_000 (SGLang's buffer_steps). */
  bufferSteps?: number;
  dpRank?: number | null;
  hwm?: number;
}

export interface StoreArgs {
  blockHashes: readonly bigint[];
  parentBlockHash?: bigint | null;
  tokenIds: readonly number[];
  blockSize: number;
  medium?: string | null;
  loraId?: number | null;
  cacheSalt?: string | null;
  sessionId?: string | null;
  loraName?: string | null;
}

export class KvEventPublisher {
  private readonly opts: PublisherOptions;
  private pub: XPublisher | null = null;
  private subscriptions = 0;
  private subscriptionWaiters: { count: number; resolve: () => void }[] = [];
  private subscriptionLoop: Promise<void> | null = null;
  private router: Router | null = null;
  private seqNext = 0n;
  private readonly buffer: { seq: bigint; payload: Buffer }[] = [];
  private events: KvEvent[] = [];
  private chain: Promise<void> = Promise.resolve();
  private replayLoop: Promise<void> | null = null;
  private closed = false;
  /** The endpoints actually bound (ephemeral ports resolved). */
  endpoint = "";
  replayEndpoint: string | null = null;

  constructor(opts: PublisherOptions) {
    this.opts = opts;
  }

  async bind(): Promise<this> {
    const pub = new XPublisher({ linger: 0, sendHighWaterMark: this.opts.hwm ?? 100_000 });
    pub.verbosity = "allSubs"; // every subscriber's subscription, not only new topics
    await pub.bind(this.opts.endpoint);
    this.pub = pub;
    this.subscriptionLoop = this.countSubscriptions(pub);
    this.endpoint = pub.lastEndpoint ?? this.opts.endpoint;
    if (this.opts.replayEndpoint) {
      const router = new Router({ linger: 0 });
      await router.bind(this.opts.replayEndpoint);
      this.router = router;
      this.replayEndpoint = router.lastEndpoint ?? this.opts.replayEndpoint;
      this.replayLoop = this.serveReplay(router);
    }
    return this;
  }

  /** Queues a BlockStored (one or many pages) for the next flush. */
  blockStored(a: StoreArgs): this {
    if (!(a.blockSize > 0)) throw new RangeError("blockSize must be positive");
    const medium = a.medium ?? "GPU";
    this.events.push({
      type: "BlockStored",
      blockHashes: [...a.blockHashes],
      parentBlockHash: a.parentBlockHash ?? null,
      tokenIds: [...a.tokenIds],
      blockSize: a.blockSize,
      loraId: a.loraId ?? null,
      medium,
      tier: tierOfMedium(medium),
      cacheSalt: a.cacheSalt ?? null,
      sessionId: a.sessionId ?? null,
      loraName: a.loraName ?? null,
      bigram: false,
    });
    return this;
  }

  blockRemoved(blockHashes: readonly bigint[], medium: string | null = "GPU"): this {
    this.events.push({
      type: "BlockRemoved",
      blockHashes: [...blockHashes],
      medium,
      tier: tierOfMedium(medium),
    });
    return this;
  }

  allBlocksCleared(): this {
    this.events.push({ type: "AllBlocksCleared" });
    return this;
  }

  /** Sends the queued events as one batch; returns its seq (or null when nothing was queued). */
  async flush(ts = Date.now() / 1000): Promise<bigint | null> {
    if (this.events.length === 0) return null;
    const batch: KvEventBatch = { ts, events: this.events, dpRank: this.opts.dpRank ?? 0 };
    this.events = [];
    return this.publish(batch);
  }

  /** Sends one batch now, with the next seq. */
  async publish(batch: KvEventBatch): Promise<bigint> {
    if (!this.pub || this.closed) throw new Error("publisher is not bound");
    const seq = this.seqNext++;
    const payload = encodeBatch(batch);
    this.buffer.push({ seq, payload });
    const max = this.opts.bufferSteps ?? 10_000;
    if (this.buffer.length > max) this.buffer.splice(0, this.buffer.length - max);
    const pub = this.pub;
    const topic = Buffer.from(this.opts.topic ?? "", "utf8");
    // zeromq allows one send at a time per socket: chain them, in seq order.
    const p = this.chain.then(() => pub.send([topic, encodeSeq(seq), payload]));
    this.chain = p.catch(() => undefined);
    await p;
    return seq;
  }

  /**
   * Resolves once `count` subscriptions (every subscriber's, each of its topics) have reached the
   * socket: from then on those subscribers receive every batch. Rejects after `timeoutMs`.
   */
  waitForSubscribers(count = 1, timeoutMs = 30_000): Promise<void> {
    if (this.subscriptions >= count) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.subscriptionWaiters = this.subscriptionWaiters.filter((w) => w !== waiter);
        reject(
          new Error(
            `${this.subscriptions} of ${count} subscription(s) reached ${this.endpoint} within ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      const waiter = {
        count,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.subscriptionWaiters.push(waiter);
    });
  }

  /** Subscriptions that have reached the socket so far. */
  get subscriberCount(): number {
    return this.subscriptions;
  }

  private async countSubscriptions(pub: XPublisher): Promise<void> {
    try {
      for await (const [msg] of pub) {
        if (msg?.[0] !== 1) continue; // 0 = unsubscribe
        this.subscriptions++;
        const ready = this.subscriptionWaiters.filter((w) => w.count <= this.subscriptions);
        this.subscriptionWaiters = this.subscriptionWaiters.filter(
          (w) => w.count > this.subscriptions,
        );
        for (const w of ready) w.resolve();
      }
    } catch {
      // closed
    }
  }

  /** Next seq this publisher will use. */
  get nextSeq(): bigint {
    return this.seqNext;
  }

  private async serveReplay(router: Router): Promise<void> {
    const topic = Buffer.from(this.opts.topic ?? "", "utf8");
    try {
      for await (const msg of router) {
        if (msg.length !== 3 || msg[2].length !== 8) continue; // invalid request, as SGLang: ignore
        const [client] = msg;
        const start = decodeSeq(msg[2]);
        for (const { seq, payload } of [...this.buffer]) {
          if (seq >= start)
            await router.send([client, Buffer.alloc(0), topic, encodeSeq(seq), payload]);
        }
        await router.send([
          client,
          Buffer.alloc(0),
          Buffer.alloc(0),
          encodeSeq(END_SEQ),
          Buffer.alloc(0),
        ]);
      }
    } catch {
      // closed
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.chain;
    this.pub?.close();
    this.router?.close();
    await this.replayLoop;
    await this.subscriptionLoop;
  }
}
