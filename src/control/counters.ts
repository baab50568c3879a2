// Publisher counters: what was sent, how it was answered, what never left. Plain numbers so a
// metrics exporter can read them without this module knowing about one.
import { ACK_STATUSES, type AckStatus } from "../protocol/index.js";

export interface ControlCounters {
  /** Commands put on the wire (requests, broadcasts, fire-and-forget), first attempts only. */
  sent: number;
  /** Re-sends of an earlier command with the same id. */
  retried: number;
  /** Fire-and-forget publishes (also counted in `sent`). */
  published: number;
  /** Acks received, by status (a broadcast counts one per answering worker). */
  acked: Record<AckStatus, number>;
  /** Commands that ended without an ack because no one answered in time. */
  timedOut: number;
  /** Commands that ended because no subscriber existed. */
  noResponders: number;
  /** Workers named silent by broadcasts. */
  silentWorkers: number;
  /** Commands refused before leaving: invalid, or the window was full. */
  rejectedLocally: number;
  /** Replies that were not a valid Ack for the command. */
  invalidAcks: number;
  /** Other delivery failures (closed connection, ...). */
  failed: number;
}

export function newCounters(): ControlCounters {
  const acked = Object.fromEntries(ACK_STATUSES.map((s) => [s, 0])) as Record<AckStatus, number>;
  return {
    sent: 0,
    retried: 0,
    published: 0,
    acked,
    timedOut: 0,
    noResponders: 0,
    silentWorkers: 0,
    rejectedLocally: 0,
    invalidAcks: 0,
    failed: 0,
  };
}
