// Segment seeds of generated workloads. Each seed is a distinct structured value (what it is, whose
// it is, which of theirs) XORed with a salt drawn from the workload's seed: within one workload no
// two segments share a seed unless they are meant to (a tenant's tool schemas, an agent's system
// prompt), and two workloads of different seeds share no content.
import { hash53 } from "./random.js";

const TWO_32 = 4294967296;
const INDEX_BITS = 26;
const COUNTER_BITS = 24;

/** What a seed names: its top three bits. */
export const SeedKind = { tools: 0, system: 1, program: 2, flood: 3 } as const;
export type SeedKind = (typeof SeedKind)[keyof typeof SeedKind];

/** The salt of a workload seed (53 bits). */
export function seedSalt(seed: number): number {
  return hash53(`kvctl-sim-workload:${seed}`);
}

function xor53(a: number, b: number): number {
  const hi = (Math.floor(a / TWO_32) ^ Math.floor(b / TWO_32)) >>> 0;
  const lo = ((a >>> 0) ^ (b >>> 0)) >>> 0;
  return hi * TWO_32 + lo;
}

/** The seed of the `counter`-th segment of kind `kind` owned by `index` (a tenant, a program). */
export function structuredSeed(
  salt: number,
  kind: SeedKind,
  index: number,
  counter: number,
): number {
  if (!Number.isInteger(index) || index < 0 || index >= 2 ** INDEX_BITS)
    throw new RangeError(`seed index ${index} is outside [0, 2^${INDEX_BITS})`);
  if (!Number.isInteger(counter) || counter < 0 || counter >= 2 ** COUNTER_BITS)
    throw new RangeError(`seed counter ${counter} is outside [0, 2^${COUNTER_BITS})`);
  return xor53((kind * 2 ** INDEX_BITS + index) * 2 ** COUNTER_BITS + counter, salt);
}
