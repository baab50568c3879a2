// STAND-IN, NOT THE WORKER. `ReferenceResponder` subscribes to a worker's control subjects and
// answers like the worker-side contract says a worker must (validate with the same schemas, ack
// every request, dedupe ids, name the bad field), backed by `ReferenceWorkerModel`, an in-memory
// toy. It exists for this package's tests, benches and `kvctl testing-worker` demos until the
// SGLang subscriber exists. It logs that it is a stand-in when it starts; its acks carry the
// worker_id its caller gave it.
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import {
  type Ack,
  ACK_STATUSES,
  type AckStatus,
  blankAck,
  broadcastSubject,
  type Command,
  DEFAULT_SUBJECT_PREFIX,
  decodeBody,
  encodeAckBytes,
  workerSubject,
} from "../protocol/index.js";
import { type ReferenceModelOptions, ReferenceWorkerModel } from "./reference-worker-model.js";

export interface ReferenceResponderOptions extends ReferenceModelOptions {
  workerId: string;
  subjectPrefix?: string;
  /** Subscribe but never answer (a hung worker). */
  silent?: boolean;
  /** Answer this many ms late (a slow worker). */
  delayMs?: number;
  /** Where the start-up line and per-command lines go (default: stderr for the start-up line only). */
  log?: (line: string) => void;
  /** Log every command received (for demos). */
  verbose?: boolean;
  /** Seed the model with this chain of known blocks. */
  knownBlocks?: Iterable<bigint>;
  /** Keep every decoded command in `received` (tests; grows without bound, so off by default). */
  record?: boolean;
}

export interface ResponderStats {
  received: number;
  acked: Record<AckStatus, number>;
  /** Fire-and-forget commands applied (no reply subject). */
  unanswered: number;
}

export class ReferenceResponder {
  readonly model: ReferenceWorkerModel;
  readonly workerId: string;
  readonly stats: ResponderStats;
  /** Every decoded command in arrival order, when `record` is set (tests look at what got through). */
  readonly received: Array<{ id: string | null; command: Command | null; subject: string }> = [];
  private subs: Subscription[] = [];

  constructor(private readonly opts: ReferenceResponderOptions) {
    this.workerId = opts.workerId;
    this.model = new ReferenceWorkerModel(opts);
    if (opts.knownBlocks) this.model.addPath(opts.knownBlocks);
    this.stats = {
      received: 0,
      acked: Object.fromEntries(ACK_STATUSES.map((s) => [s, 0])) as Record<AckStatus, number>,
      unanswered: 0,
    };
  }

  /** Creates a responder and subscribes it on `nc`; resolves once the server has the subscriptions. */
  static async start(
    nc: NatsConnection,
    opts: ReferenceResponderOptions,
  ): Promise<ReferenceResponder> {
    const r = new ReferenceResponder(opts);
    await r.listen(nc);
    return r;
  }

  async listen(nc: NatsConnection): Promise<void> {
    const prefix = this.opts.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    const subjects = [workerSubject(this.workerId, prefix), broadcastSubject(prefix)];
    for (const subject of subjects)
      this.subs.push(
        nc.subscribe(subject, {
          callback: (err, msg) => void (err ? undefined : this.onMessage(msg)),
        }),
      );
    await nc.flush();
    (this.opts.log ?? ((l: string) => console.error(l)))(
      `[kvctl ReferenceResponder] test stand-in, NOT the SGLang worker: answering as worker_id=${this.workerId} on ${subjects.join(", ")}`,
    );
  }

  stop(): void {
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
  }

  private onMessage(msg: Msg): void {
    if (this.opts.silent) return;
    if (this.opts.delayMs) setTimeout(() => this.answer(msg), this.opts.delayMs);
    else this.answer(msg);
  }

  private answer(msg: Msg): void {
    const ack = this.handle(msg.data, msg.subject);
    if (msg.reply) msg.respond(encodeAckBytes(ack));
    else this.stats.unanswered++;
  }

  /** Body bytes -> ack. Never throws: any failure becomes a `rejected` or `error` ack. */
  handle(body: Uint8Array | string, subject = ""): Ack {
    const t0 = performance.now();
    this.stats.received++;
    let ack: Ack;
    const decoded = decodeBody(body);
    if (!decoded.ok) {
      ack = blankAck(this.workerId, decoded.id, decoded.type, "rejected");
      ack.reason = decoded.error.message;
      if (this.opts.record) this.received.push({ id: decoded.id, command: null, subject });
    } else {
      if (this.opts.record)
        this.received.push({ id: decoded.id, command: decoded.command, subject });
      const first = decoded.id === null ? undefined : this.model.seen(decoded.id);
      if (first) {
        // Not applied again; report the first outcome's numbers and name its status.
        ack = {
          ...first,
          status: "duplicate",
          reason: `duplicate of ${decoded.id}; first outcome: ${first.status}${first.reason ? ` (${first.reason})` : ""}`,
        };
      } else {
        try {
          ack = this.model.apply(this.workerId, decoded.id, decoded.command);
        } catch (e) {
          ack = blankAck(this.workerId, decoded.id, decoded.command.type, "error");
          ack.reason = `reference model failed: ${e instanceof Error ? e.message : String(e)}`;
        }
      }
    }
    ack.elapsed_us = Math.round((performance.now() - t0) * 1000);
    this.stats.acked[ack.status]++;
    if (this.opts.verbose && this.opts.log)
      this.opts.log(
        `${subject} ${ack.type ?? "?"} id=${ack.id ?? "-"} -> ${ack.status}${ack.reason ? `: ${ack.reason}` : ""}`,
      );
    return ack;
  }
}
