// The control plane on the virtual clock: what the gateway's command sink and Prefetch sender call
// (ControlPublisher's send and broadcast), carried to the fleet's workers as the same envelope
// bytes a NATS subscriber would receive, answered with the worker's own ack bytes. Ids are
// numbered, so a run's commands are the same bytes every time. SimPool answers the one HTTP call
// the gateway makes of a session-radix worker (POST /close_session).
import type { BroadcastResult, ControlPublisher } from "../../control/publisher.js";
import {
  type Ack,
  type Command,
  decodeAck,
  encodeEnvelopeBytes,
  makeEnvelope,
  validateCommand,
} from "../../protocol/index.js";
import type { CommandCounts, FrontHost } from "./types.js";

export class SimPublisher {
  private seq = 0;
  readonly counts: Record<string, CommandCounts> = {};

  constructor(
    private readonly host: FrontHost,
    private readonly prefix: string,
  ) {}

  private count(type: string): CommandCounts {
    this.counts[type] ??= { sent: 0, acked: {} };
    return this.counts[type];
  }

  async send(worker: string, cmd: Command, opts: { id?: string } = {}): Promise<Ack> {
    const valid = validateCommand(cmd);
    const id = opts.id ?? `${this.prefix}-${++this.seq}`;
    const env = makeEnvelope(valid, id, Math.floor(this.host.clock.nowMs()));
    const c = this.count(valid.type);
    c.sent++;
    const ack = decodeAck(await this.host.command(worker, encodeEnvelopeBytes(env)));
    c.acked[ack.status] = (c.acked[ack.status] ?? 0) + 1;
    return ack;
  }

  async broadcast(cmd: Command, opts: { id?: string } = {}): Promise<BroadcastResult> {
    const id = opts.id ?? `${this.prefix}-${++this.seq}`;
    const acks = await Promise.all(this.host.workers.map((w) => this.send(w, cmd, { id })));
    return { id, acks, silent: [], unexpected: [], noResponders: false, invalidReplies: 0 };
  }

  /** Typed as what the gateway's parts take (they call send and broadcast only). */
  asPublisher(): ControlPublisher {
    return this as unknown as ControlPublisher;
  }
}

/** undici's Pool.request as callJson uses it, for POST /close_session on one simulated worker. */
export function simPool(host: FrontHost, worker: string) {
  return {
    request(o: { method: string; path: string; body?: string }) {
      if (o.method !== "POST" || o.path !== "/close_session")
        return Promise.resolve({ statusCode: 404, body: { text: async () => "not simulated" } });
      const { session_id } = JSON.parse(o.body ?? "{}") as { session_id: string };
      host.closeSession(worker, session_id);
      return Promise.resolve({ statusCode: 200, body: { text: async () => "" } });
    },
  };
}
