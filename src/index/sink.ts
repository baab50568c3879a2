// Plugs an index into the consumer: every decoded batch goes through applyEvent, an event at a
// time (each event is applied whole or not at all), and a publisher restart clears the worker.
import type { EventSink } from "../events/consumer.js";
import type { KvEventBatch } from "../events/types.js";
import type { EventColumns } from "../events/native.js";
import type { KvIndex } from "./types.js";

export function indexSink(index: KvIndex, log: (line: string) => void = (l) => console.error(l)): EventSink {
  return {
    applyBatch(worker: string, batch: KvEventBatch, seq: bigint): void {
      batch.events.forEach((e, i) => {
        try {
          index.applyEvent(worker, e);
        } catch (err) {
          log(`kv-index: worker ${worker} seq ${seq} event ${i}: ${(err as Error).message} (skipped)`);
        }
      });
    },
    get needsTokens() {
      return index.needsTokens ?? false;
    },
    applyColumns: index.applyColumns
      ? (worker: string, columns: EventColumns, seq: bigint): void => {
          try {
            index.applyColumns?.(worker, columns);
          } catch (err) {
            log(`kv-index: worker ${worker} seq ${seq}: ${(err as Error).message} (skipped)`);
          }
        }
      : undefined,
    resetWorker(worker: string): void {
      index.clearWorker(worker);
    },
  };
}
