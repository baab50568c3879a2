// The parameters of a generated workload, checked before anything is generated: a bad one is
// refused with its name and what it must be.
import { FLOOD_SHAPE } from "./shape.js";
import { MAX_VOCAB } from "./tokens.js";

export type GapScale = "seconds" | "minutes";

export interface GenerateOptions {
  seed: number;
  /** Agent programs (sessions), at least 1. */
  programs: number;
  /** Tenants the programs are spread over, round robin, at least 1. */
  tenants: number;
  /** The context limit programs grow to and compact at (tokens), at least 1024. */
  context: number;
  /** Human gaps between user turns: tens of seconds, or minutes (tool gaps are seconds in both). */
  gaps: GapScale;
  /** Unrelated single-request programs beside the agents (family `flood`). */
  flood: boolean;
  /** The model vocabulary (default 128256, Llama 3's). */
  vocab?: number;
  /** Programs start uniformly within this window (s, default 600). */
  arrivalWindowS?: number;
  /** Agents (system prompts) per tenant, sharing the tenant's tool schemas (default 2). */
  agentsPerTenant?: number;
  /** User turns a program holds at most: the part of a session inside the run (default 4). */
  maxTurns?: number;
  /** Flood requests when `flood` is on (default 3 per program). */
  floodRequests?: number;
}

export const GENERATE_DEFAULTS = {
  vocab: 128256,
  arrivalWindowS: 600,
  agentsPerTenant: 2,
  maxTurns: 4,
} as const;

function need(ok: boolean, field: string, what: string, got: unknown): void {
  if (!ok) throw new RangeError(`${field}: expected ${what}, got ${JSON.stringify(got)}`);
}

const isInt = (v: unknown, min: number) => Number.isSafeInteger(v) && (v as number) >= min;

export function checkGenerateOptions(o: GenerateOptions): void {
  need(isInt(o.seed, 0), "seed", "an integer >= 0", o.seed);
  need(
    isInt(o.programs, 1) && o.programs < 2 ** 26,
    "programs",
    "an integer in [1, 2^26)",
    o.programs,
  );
  need(isInt(o.tenants, 1) && o.tenants < 2 ** 26, "tenants", "an integer in [1, 2^26)", o.tenants);
  need(isInt(o.context, 1024), "context", "an integer >= 1024 (tokens)", o.context);
  need(o.gaps === "seconds" || o.gaps === "minutes", "gaps", '"seconds" or "minutes"', o.gaps);
  need(typeof o.flood === "boolean", "flood", "true or false", o.flood);
  if (o.vocab !== undefined)
    need(
      isInt(o.vocab, 2) && o.vocab <= MAX_VOCAB,
      "vocab",
      `an integer in [2, ${MAX_VOCAB}]`,
      o.vocab,
    );
  if (o.arrivalWindowS !== undefined)
    need(
      Number.isFinite(o.arrivalWindowS) && o.arrivalWindowS >= 0,
      "arrivalWindowS",
      "a number >= 0 (s)",
      o.arrivalWindowS,
    );
  if (o.agentsPerTenant !== undefined)
    need(
      isInt(o.agentsPerTenant, 1) && o.agentsPerTenant < 2 ** 24,
      "agentsPerTenant",
      "an integer >= 1",
      o.agentsPerTenant,
    );
  if (o.maxTurns !== undefined)
    need(isInt(o.maxTurns, 1), "maxTurns", "an integer >= 1", o.maxTurns);
  if (o.floodRequests !== undefined)
    need(
      isInt(o.floodRequests, 0) && o.floodRequests < 2 ** 26,
      "floodRequests",
      "an integer in [0, 2^26)",
      o.floodRequests,
    );
}

/** The options with their defaults filled in (flood requests 0 when the flood is off). */
export function resolveOptions(o: GenerateOptions) {
  return {
    seed: o.seed,
    programs: o.programs,
    tenants: o.tenants,
    context: o.context,
    gaps: o.gaps,
    vocab: o.vocab ?? GENERATE_DEFAULTS.vocab,
    arrivalWindowS: o.arrivalWindowS ?? GENERATE_DEFAULTS.arrivalWindowS,
    agentsPerTenant: o.agentsPerTenant ?? GENERATE_DEFAULTS.agentsPerTenant,
    maxTurns: o.maxTurns ?? GENERATE_DEFAULTS.maxTurns,
    floodRequests: o.flood ? (o.floodRequests ?? FLOOD_SHAPE.perProgram * o.programs) : 0,
  };
}
