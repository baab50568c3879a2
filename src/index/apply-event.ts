// An engine-neutral event object onto the key-level index: for tools, tests and sinks that hold
// decoded events (the consumer's hot path applies whole frames natively instead).
import type { KvEvent } from "../events/types.js";
import type { ApplyResult, KvIndex } from "./types.js";
import { emptyApplyResult } from "./types.js";

export function applyEvent(index: KvIndex, worker: string, event: KvEvent): ApplyResult {
  if (event.type === "BlockStored")
    return index.add(worker, event.tier, event.blockHashes, event.parentBlockHash);
  if (event.type === "BlockRemoved") return index.evict(worker, event.tier, event.blockHashes);
  const r = emptyApplyResult();
  r.removed = index.clear(worker);
  return r;
}
