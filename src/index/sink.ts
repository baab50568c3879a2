// Plugs an index into the consumer: a frame-applying index gets every payload whole (one native
// call: decode, verify, apply, and the events back from that decode when the consumer's
// listeners want them); any other KvIndex gets decoded events, each applied whole. A publisher
// restart clears the worker.
import type { EventSink } from "../events/consumer.js";
import type { KvEventBatch } from "../events/types.js";
import { applyEvent } from "./apply-event.js";
import type { FrameIndex, KvIndex } from "./types.js";

export function indexSink(
  index: KvIndex,
  log: (line: string) => void = (l) => console.error(l),
): EventSink {
  const frames =
    typeof (index as Partial<FrameIndex>).applyFrame === "function" ? (index as FrameIndex) : null;
  return {
    applyFrame: frames
      ? (worker: string, payload: Uint8Array, _seq: bigint, withEvents?: boolean) => {
          if (!withEvents || !frames.applyFrameDecoded) return frames.applyFrame(worker, payload);
          const { result, batch } = frames.applyFrameDecoded(worker, payload);
          return { ...result, decoded: batch };
        }
      : undefined,
    applyBatch(worker: string, batch: KvEventBatch, seq: bigint): void {
      batch.events.forEach((e, i) => {
        try {
          applyEvent(index, worker, e);
        } catch (err) {
          log(
            `kv-index: worker ${worker} seq ${seq} event ${i}: ${(err as Error).message} (skipped)`,
          );
        }
      });
    },
    resetWorker(worker: string): void {
      index.clearWorker(worker);
    },
  };
}
