// The seams between `kvctl sim`'s parts, one type per thing that crosses them:
//
//   workload/  (programs)  ─► engine (virtual clock, the gateway's own front objects,
//   profiles   (timing)    ─►        the fleet of SGLang caches in python/kvctl_sim)
//                                   │
//                                   ▼
//                        SimRunResult / SimMapResult ─► bench:sim --json, report/ (HTML)
//
// A part may add optional fields; it changes no field another part reads without changing
// that part in the same commit.

/**
 * A run of tokens whose ids are a pure function of `(seed, index)` (workload/tokens.ts is the one
 * place that maps them). Two segments with the same seed share their first min(len) tokens, so
 * shared prefixes, replayed answers and a trace's shared hash ids are all written as shared seeds.
 */
export interface Segment {
  /** Non-negative integer, below 2^53. */
  seed: number;
  /** Tokens, at least 1. */
  len: number;
  /**
   * The token ids themselves, when the workload has real ones (a replayed trace of a real
   * server's requests); `len` is then `ids.length` and `seed` only names the segment.
   */
  ids?: readonly number[];
}

/** Why a program's request waited before it was sent. */
export type GapKind = "start" | "tool" | "human";

/** One request of a program: what the client sends, and what the worker will generate. */
export interface SimRequestSpec {
  /** The whole prompt, in order (a returning turn repeats its history's segments). */
  prompt: Segment[];
  /** The tokens the worker generates, in order; SGLang caches them after the prompt. */
  output: Segment[];
  /** Leading output tokens that are reasoning (a template that drops them does not replay them). */
  reasoningTokens: number;
  /** Seconds between the previous request's last token and this request's arrival (the first: 0). */
  gapS: number;
  gapKind: GapKind;
  /** The tool whose result this request carries (gapKind "tool"). */
  tool?: string;
  /** A client cache breakpoint (Anthropic cache_control, OpenAI prompt_cache_retention). */
  cacheMarker?: { tokens: number; ttlS: number };
  /** The client rewrote (compacted) its history before this request. */
  rewrite?: boolean;
}

/** A closed-loop agent program (a session): its requests go out one after another. */
export interface SimProgram {
  id: string;
  tenant: string;
  /** "bfcl", "coding", "generated", "flood", "trace", ... */
  family: string;
  /** Arrival of the first request, seconds from the run's start. */
  startS: number;
  requests: SimRequestSpec[];
}

export interface SimWorkload {
  name: string;
  /** The model vocabulary the token ids are drawn below. */
  vocab: number;
  programs: SimProgram[];
  /** Where it came from and with what parameters (printed; part of the JSON). */
  meta: Record<string, string | number | boolean>;
}

/** The figures of one configuration (or the oracle) over one run. */
export interface SimConfigFigures {
  recomputed_tokens: number;
  prefill_gpu_s: number;
  ttft_p50_ms: number;
  ttft_p90_ms: number;
  ttft_p99_ms: number;
  /** Programs finished per simulated hour whose returning-turn TTFT p90 met the target. */
  goodput_programs_per_h: number;
}

export interface SimPercentiles {
  n: number;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
}

export interface SimConfigResult extends SimConfigFigures {
  /** TTFT over every finished request, first turns and floods included: the one TTFT a trace of
   * independent requests has (Dynamo's replay reports this one). */
  ttft_all: SimPercentiles;
  /** Returning-turn TTFT by the gap before the turn ("<10s", "10s-1m", "1-5m", ">5m"). */
  ttft_by_gap: Record<string, SimPercentiles>;
  /** Returning-turn TTFT by prompt length ("<8K", "8-32K", "32-64K", ">64K"). */
  ttft_by_context: Record<string, SimPercentiles>;
  /** Bytes moved per link: h2d, d2h, storage_read, storage_write. */
  bytes_moved: Record<string, number>;
  /** Prompt tokens HiCache's L3 prefetch brought back to the host tier before admission. */
  storage_hit_tokens?: number;
  /** Commands sent and their acks by status, per command type. */
  commands: Record<string, { sent: number; acked: Record<string, number> }>;
  /** The returning-turn TTFT distribution: [ms, share of requests at or below] ascending. */
  ttft_cdf: [number, number][];
  errors: number;
}

/** What every figure names: the timing it came from and how far that was validated. */
export interface SimProfileRef {
  name: string;
  gpu: string;
  model: string;
  tp: number;
  /** How the step times were obtained and checked (e.g. "aiconfigurator 0.12.0 silicon tables"). */
  validation: string;
}

export interface SimRunResult {
  bench: "sim";
  wall_s: number;
  simulated_s: number;
  workers: number;
  programs: number;
  requests: number;
  seed: number;
  profile: SimProfileRef;
  workload: string;
  configs: Record<string, SimConfigResult>;
  oracle: SimConfigResult;
}

export interface SimMapCell {
  /** Agent programs the cell's workload holds. */
  programs?: number;
  /** The peak live working set over the fleet's device + host capacity the cell ran at (below
   * `oversubscription` where a pool had to grow to hold the largest request). */
  effective_oversubscription?: number;
  /** Whether the pools were under pressure, from the runs' own counters (medians over the
   * seeds), read off `cache_aware` (plain SGLang with HiCache, KV-aware routing): KV loaded back
   * from host per program (the device evicted what a later request needed), and its recomputed
   * tokens over the oracle's (above 1: the capacity cost it tokens a perfect cache kept). */
  pressure?: { h2d_mb_per_program: number; recomputed_over_oracle: number };
  families: string[];
  workers: number;
  oversubscription: number;
  context: number;
  gaps: "seconds" | "minutes";
  flood: boolean;
  best_peer: { name: string; ttft_p90_ms: number; gpu_s_per_program: number };
  kvctl: { ttft_p90_ms: number; gpu_s_per_program: number };
  oracle: { ttft_p90_ms: number; gpu_s_per_program: number };
}

export interface SimMapResult {
  bench: "sim-map";
  profile: SimProfileRef;
  seeds: number[];
  programs_per_cell: number;
  cells: SimMapCell[];
}
