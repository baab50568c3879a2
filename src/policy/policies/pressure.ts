// Which idle sessions the idle rule pauses under device pressure, decided from a snapshot: the
// worker's working set (the larger of what its KV events put on its GPU and what this replica's
// unpaused sessions hold there) against the high and low watermarks of its device blocks, with
// hysteresis (once past the high mark the rule keeps pausing until the low one). Pure: it reads
// the snapshot and returns the order to pause in and the next hysteresis state; the idle rule
// applies it (a pause may still be refused by the pin budget, so it walks the order itself).

export interface PressureSession {
  readonly id: string;
  readonly worker: string | null;
  readonly chain: readonly bigint[];
  readonly paused: boolean;
  readonly inFlight: boolean;
  /** Its blocks are already on host for a tool call. */
  readonly offloaded: boolean;
}

export interface PressureSnapshot {
  readonly worker: string;
  /** The worker's device blocks (0: no pressure rule). */
  readonly capBlocks: number;
  readonly highWatermark: number;
  readonly lowWatermark: number;
  /** Blocks the worker's KV events put on its GPU, when known. */
  readonly indexedBlocks: number | null;
  readonly sessions: readonly PressureSession[];
  /** Past the high mark and not yet back under the low one. */
  readonly tripped: boolean;
}

export interface PressurePlan {
  /** Whether to pause at all (past the high mark, or still tripped). */
  readonly act: boolean;
  /** The next hysteresis state when nothing is paused. */
  readonly tripped: boolean;
  /** The working set now (blocks). */
  readonly seen: number;
  readonly low: number;
  readonly high: number;
  /** Idle sessions to pause in order (most blocks of their own first), with what pausing each frees. */
  readonly order: readonly { readonly session: string; readonly freed: number }[];
}

export function planPressure(s: PressureSnapshot): PressurePlan {
  const high = s.highWatermark * s.capBlocks;
  const low = s.lowWatermark * s.capBlocks;
  const users = new Map<bigint, number>();
  for (const x of s.sessions) {
    if (x.worker !== s.worker || x.paused) continue;
    for (const h of x.chain) users.set(h, (users.get(h) ?? 0) + 1);
  }
  const seen = Math.max(users.size, s.indexedBlocks ?? 0);
  const none = (tripped: boolean): PressurePlan => ({
    act: false,
    tripped,
    seen,
    low,
    high,
    order: [],
  });
  if (!s.capBlocks) return none(false);
  if (seen < high) {
    const tripped = s.tripped && seen > low;
    if (!tripped) return none(false);
  }
  const own = (x: PressureSession) => x.chain.filter((h) => users.get(h) === 1).length;
  const order = s.sessions
    .filter(
      (x) => x.worker === s.worker && !x.inFlight && !x.paused && x.chain.length && !x.offloaded,
    )
    .map((x) => ({ session: x.id, freed: own(x) }))
    .sort((a, b) => b.freed - a.freed);
  return { act: true, tripped: true, seen, low, high, order };
}
