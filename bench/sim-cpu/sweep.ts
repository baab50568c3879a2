// The grids, sampled in sweeps: each sweep takes one sample of every cell, in a fresh seeded
// order, so a cell's repeats are spread over the whole calibration and a spell of load on the
// shared machine lands on many cells a little instead of on a few cells wholly.
import { rng } from "../agent/workload.js";
import {
  type DecodeCell,
  decodeSample,
  type PrefillCell,
  type PrefillSample,
  Prefixes,
  prefillSample,
  OWN_TOKENS,
  type Tokens,
} from "./measure.js";

function shuffled<T>(xs: readonly T[], r: () => number): T[] {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/** One sample, its prefix cached again and the sample taken again when a try fails its checks. */
async function retried<T>(what: string, take: (reseed: boolean) => Promise<T | null>): Promise<T> {
  for (let attempt = 0; attempt < 4; attempt++) {
    const v = await take(attempt > 0);
    if (v !== null) return v;
  }
  throw new Error(`${what}: the batch did not form as one with its prefix served from cache`);
}

export interface SweepOptions {
  url: string;
  tok: Tokens;
  sweeps: number;
  seed: number;
  log: (s: string) => void;
}

/** Every prefill cell `sweeps` times: per cell (key b/e/p) its samples in the order taken. */
export async function sweepPrefill(
  cells: readonly PrefillCell[],
  o: SweepOptions,
): Promise<Map<string, PrefillSample[]>> {
  const prefixes = new Prefixes(o.url, o.tok);
  const out = new Map<string, PrefillSample[]>(cells.map((c) => [key(c), []]));
  const r = rng(o.seed);
  for (let s = 0; s < o.sweeps; s++) {
    for (const c of shuffled(cells, r)) {
      const sample = await retried(`prefill ${key(c)}`, async (reseed) =>
        prefillSample(o.url, c, await prefixes.get(c.prefix, reseed), o.tok),
      );
      out.get(key(c))?.push(sample);
    }
    o.log(`  prefill sweep ${s + 1}/${o.sweeps} done`);
  }
  return out;
}

/** Every decode cell `sweeps` times (ms per step): per cell (key b/c) its samples. */
export async function sweepDecode(
  cells: readonly DecodeCell[],
  steps: number,
  o: SweepOptions,
): Promise<Map<string, number[]>> {
  const prefixes = new Prefixes(o.url, o.tok);
  const out = new Map<string, number[]>(cells.map((c) => [`${c.batch}/${c.context}`, []]));
  const r = rng(o.seed + 1);
  for (let s = 0; s < o.sweeps; s++) {
    for (const c of shuffled(cells, r)) {
      const ms = await retried(`decode ${c.batch}/${c.context}`, async (reseed) =>
        decodeSample(o.url, c, await prefixes.get(c.context - OWN_TOKENS, reseed), steps, o.tok),
      );
      out.get(`${c.batch}/${c.context}`)?.push(ms);
    }
    o.log(`  decode sweep ${s + 1}/${o.sweeps} done`);
  }
  return out;
}

export const key = (c: PrefillCell) => `${c.batch}/${c.extend}/${c.prefix}`;
