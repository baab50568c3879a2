// UUIDv7 idempotency ids (RFC 9562): 48-bit Unix ms timestamp, then randomness. Time-ordered, so a
// worker's dedupe window can expire them by age and logs sort by issue time.
import { randomFillSync } from "node:crypto";

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));
// Random bytes come from a pool refilled in bulk: one syscall per 512 ids, not one per id.
const POOL = new Uint8Array(10 * 512);
let poolAt = POOL.length;

export function uuidv7(nowMs: number = Date.now()): string {
  if (poolAt + 10 > POOL.length) {
    randomFillSync(POOL);
    poolAt = 0;
  }
  const r = POOL.subarray(poolAt, poolAt + 10);
  poolAt += 10;
  const ms = Math.floor(nowMs);
  const hi = Math.floor(ms / 2 ** 16); // top 32 bits
  const lo = ms % 2 ** 16; // bottom 16 bits
  const h = hi.toString(16).padStart(8, "0") + lo.toString(16).padStart(4, "0");
  return (
    `${h.slice(0, 8)}-${h.slice(8, 12)}-` +
    `7${HEX[r[0]!]!.slice(1)}${HEX[r[1]!]}-` +
    `${HEX[(r[2]! & 0x3f) | 0x80]}${HEX[r[3]!]}-` +
    `${HEX[r[4]!]}${HEX[r[5]!]}${HEX[r[6]!]}${HEX[r[7]!]}${HEX[r[8]!]}${HEX[r[9]!]}`
  );
}

const UUIDV7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
export function isUuidv7(id: string): boolean {
  return UUIDV7.test(id);
}

/** The millisecond timestamp embedded in a UUIDv7. */
export function uuidv7Time(id: string): number {
  return parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}
