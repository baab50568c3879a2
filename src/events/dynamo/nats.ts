// Dynamo's KV events on its NATS event plane (`--event-plane nats`, DYN_EVENT_PLANE=nats): each
// worker publishes on `namespace.<ns>.component.<component>.endpoint.<endpoint>.kv-events`, one
// NATS message per event batch whose data is the same MessagePack envelope the ZMQ plane frames
// (without the ZMQ plane's version byte and length). Each message is put in the ZMQ plane's frame
// form and handed to the same adapter, so both planes decode, map and check alike.
import { EventEmitter } from "node:events";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { DynamoEventAdapter } from "./adapter.js";
import { DYNAMO_TOPIC } from "./decode.js";

const ENVELOPE_VERSION = 1;
const TOPIC = new TextEncoder().encode(DYNAMO_TOPIC);
const NO_ID = new Uint8Array(8);

/** The subject Dynamo publishes KV events on; `*` matches every namespace. */
export function dynamoNatsSubject(namespace = "*"): string {
  return `namespace.${namespace}.component.*.endpoint.*.${DYNAMO_TOPIC}`;
}

/** One NATS message's data as the ZMQ plane's four frames (publisher id and sequence are read from the envelope). */
export function natsEnvelopeFrames(data: Uint8Array): Uint8Array[] {
  const env = new Uint8Array(5 + data.length);
  env[0] = ENVELOPE_VERSION;
  new DataView(env.buffer).setUint32(1, data.length);
  env.set(data, 5);
  return [TOPIC, NO_ID, NO_ID, env];
}

/** Subscribes to Dynamo's KV-event subject on a NATS connection, feeding the adapter; "message" per message. */
export class DynamoNatsSubscriber extends EventEmitter {
  private sub: Subscription | null = null;
  private loop: Promise<void> | null = null;

  constructor(
    readonly adapter: DynamoEventAdapter,
    private readonly nc: NatsConnection,
    readonly subject: string = dynamoNatsSubject(),
  ) {
    super();
  }

  start(): this {
    const sub = this.nc.subscribe(this.subject);
    this.sub = sub;
    this.loop = (async () => {
      for await (const m of sub)
        this.emit("message", this.adapter.applyMessage(natsEnvelopeFrames(m.data)));
    })().catch(() => {
      // The subscription ends with its connection; whoever owns the connection reports that.
    });
    return this;
  }

  /** Resolves once the server has the subscription (events published after it are received). */
  async ready(): Promise<void> {
    await this.nc.flush();
  }

  async close(): Promise<void> {
    this.sub?.unsubscribe();
    await this.loop;
  }
}
