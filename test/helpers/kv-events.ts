// KV events as the decoder yields them, for tests that feed an index or a publisher by hand.
import type { BlockStoredEvent } from "../../src/events/types.js";

/** A BlockStored event on the GPU tier: what a test does not name is the decoder's default. */
export function blockStored(
  e: Pick<BlockStoredEvent, "blockHashes" | "tokenIds" | "blockSize"> & Partial<BlockStoredEvent>,
): BlockStoredEvent {
  return {
    type: "BlockStored",
    parentBlockHash: null,
    loraId: null,
    medium: "GPU",
    tier: "GPU",
    cacheSalt: null,
    sessionId: null,
    loraName: null,
    bigram: false,
    ...e,
  };
}
