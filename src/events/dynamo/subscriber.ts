// A ZMQ SUB socket on Dynamo's KV-event plane (one or more publishers, topic "kv-events"),
// feeding every message to a DynamoEventAdapter. A receive failure ends the loop with an
// "error" event; bad messages are the adapter's to report.
import { EventEmitter } from "node:events";
import { Subscriber } from "zeromq";
import type { DynamoEventAdapter } from "./adapter.js";
import { DYNAMO_TOPIC } from "./decode.js";

export class DynamoEventSubscriber extends EventEmitter {
  private readonly sock = new Subscriber({ receiveHighWaterMark: 100_000 });
  private loop: Promise<void> | null = null;
  private closed = false;

  constructor(
    readonly adapter: DynamoEventAdapter,
    readonly endpoints: string[],
  ) {
    super();
  }

  connect(endpoint: string): void {
    this.sock.connect(endpoint);
    if (!this.endpoints.includes(endpoint)) this.endpoints.push(endpoint);
  }

  start(): this {
    this.sock.subscribe(DYNAMO_TOPIC);
    for (const e of this.endpoints) this.sock.connect(e);
    this.loop = (async () => {
      try {
        for await (const frames of this.sock) {
          const f = this.adapter.applyMessage(frames);
          this.emit("message", f);
        }
      } catch (e) {
        if (!this.closed) this.emit("error", e);
      }
    })();
    return this;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.sock.close();
    await this.loop;
  }
}
