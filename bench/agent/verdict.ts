// bench:agent's figures over runs and its verdict per regime. Percentiles are taken over every
// returning turn of every run pooled (a p99 over a few dozen turns of one run is its worst turn);
// token counts read the run with the median recomputed count. The comparison is refused (no
// verdict) when it would not be a fair one: a configuration that did not start, one with errors,
// or one that served a different amount of prompt than the others.

/** One run of one configuration. */
export interface RunFigures {
  recomputed_tokens: number;
  prompt_tokens: number;
  errors: number;
  /** Time to first streamed event of every returning turn (ms). */
  ttft_returning: number[];
  /** Every session's first request sent to last answer done (s). */
  session_completion: number[];
  commands: Record<string, number> | null;
  /** What an ideal cache would have recomputed of this run's own prompts (null: no worker to tokenize).
   * Per run: the generated answers join later prompts, so each run serves slightly different text. */
  ideal_recomputed: number | null;
  /** Most blocks the policy's budget view held pinned on one worker at once (null: no policy pins). */
  pin_peak_blocks: number | null;
  /** Requests of the flood after the trace that were not served. */
  flood_unserved: number;
}

export interface Percentiles {
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

export interface ConfigSummary {
  recomputed_tokens: number;
  prompt_tokens: number;
  errors: number;
  returning_turns: number;
  ttft_returning_ms: Percentiles;
  session_completion_s: { mean: number | null; p90: number | null };
  commands: Record<string, number> | null;
  /** The median run's own ideal floor. */
  ideal_recomputed: number | null;
  /** The highest of the runs' pin-budget peaks (null: no run pinned through the policy). */
  pin_peak_blocks: number | null;
  runs: {
    recomputed_tokens: number;
    prompt_tokens: number;
    errors: number;
    ttft_returning_p90_ms: number | null;
    pin_peak_blocks: number | null;
    flood_unserved: number;
  }[];
}

/** Nearest-rank percentile (p in 0..1) of xs; null when empty. */
export function percentile(xs: readonly number[], p: number): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
}

const round1 = (x: number | null) => (x === null ? null : Math.round(x * 10) / 10);

/** A configuration over its runs: the median run's token and command figures, TTFT and session
 * completion over every run's turns and sessions pooled, errors summed. */
export function summarize(runs: readonly RunFigures[]): ConfigSummary {
  if (runs.length === 0) throw new Error("summarize: no runs");
  const mid = [...runs].sort((a, b) => a.recomputed_tokens - b.recomputed_tokens)[
    (runs.length - 1) >> 1
  ];
  const ttft = runs.flatMap((r) => r.ttft_returning);
  const done = runs.flatMap((r) => r.session_completion);
  return {
    recomputed_tokens: mid.recomputed_tokens,
    prompt_tokens: mid.prompt_tokens,
    errors: runs.reduce((n, r) => n + r.errors, 0),
    returning_turns: ttft.length,
    ttft_returning_ms: {
      p50: round1(percentile(ttft, 0.5)),
      p90: round1(percentile(ttft, 0.9)),
      p99: round1(percentile(ttft, 0.99)),
    },
    session_completion_s: {
      mean: done.length ? round1(done.reduce((a, b) => a + b, 0) / done.length) : null,
      p90: round1(percentile(done, 0.9)),
    },
    commands: mid.commands,
    ideal_recomputed: mid.ideal_recomputed,
    pin_peak_blocks: runs.reduce<number | null>(
      (m, r) => (r.pin_peak_blocks === null ? m : Math.max(m ?? 0, r.pin_peak_blocks)),
      null,
    ),
    runs: runs.map((r) => ({
      recomputed_tokens: r.recomputed_tokens,
      prompt_tokens: r.prompt_tokens,
      errors: r.errors,
      ttft_returning_p90_ms: round1(percentile(r.ttft_returning, 0.9)),
      pin_peak_blocks: r.pin_peak_blocks,
      flood_unserved: r.flood_unserved,
    })),
  };
}

/** The bars every run of every configuration must keep, whatever the comparison says: the policy's
 * pin budget never exceeded, and the flood after the trace served in full. */
export interface Limits {
  pin_budget_blocks: number;
  /** The highest pin-budget peak of any run of any configuration (null: none pinned). */
  pin_peak_blocks: number | null;
  pin_budget_kept: boolean;
  flood_served_in_full: boolean;
  /** Each run that broke one, named. */
  broken: string[];
}

export function limits(
  configs: Record<string, ConfigSummary | null>,
  pinBudgetBlocks: number,
): Limits {
  const broken: string[] = [];
  let peak: number | null = null;
  for (const [name, c] of Object.entries(configs)) {
    for (const [i, r] of (c?.runs ?? []).entries()) {
      if (r.pin_peak_blocks !== null) peak = Math.max(peak ?? 0, r.pin_peak_blocks);
      if (r.pin_peak_blocks !== null && r.pin_peak_blocks > pinBudgetBlocks)
        broken.push(
          `${name} run ${i + 1} pinned ${r.pin_peak_blocks} blocks on one worker, over the budget of ${pinBudgetBlocks}`,
        );
      if (r.flood_unserved > 0)
        broken.push(`${name} run ${i + 1} left ${r.flood_unserved} flood requests unserved`);
    }
  }
  return {
    pin_budget_blocks: pinBudgetBlocks,
    pin_peak_blocks: peak,
    pin_budget_kept: !broken.some((b) => b.includes("over the budget")),
    flood_served_in_full: !broken.some((b) => b.includes("flood")),
    broken,
  };
}

/** Served prompt tokens may differ between configurations by this share at most. */
export const PROMPT_TOLERANCE = 0.005;

/** Why a regime's comparison is not a fair one (empty: it is). */
export function unfairness(
  configs: Record<string, ConfigSummary | null>,
  notRun: Record<string, string>,
): string[] {
  const problems: string[] = [];
  for (const [name, why] of Object.entries(notRun)) problems.push(`${name} did not run: ${why}`);
  const ran = Object.entries(configs).filter((e): e is [string, ConfigSummary] => e[1] !== null);
  for (const [name, c] of ran)
    if (c.errors > 0) problems.push(`${name} had ${c.errors} failed requests`);
  const all = ran.flatMap(([, c]) => c.runs.map((r) => r.prompt_tokens)).sort((a, b) => a - b);
  const ref = all.length ? all[(all.length - 1) >> 1] : 0;
  for (const [name, c] of ran) {
    for (const [i, r] of c.runs.entries()) {
      const off = ref > 0 ? Math.abs(r.prompt_tokens - ref) / ref : 0;
      if (off > PROMPT_TOLERANCE)
        problems.push(
          `${name} run ${i + 1} served ${r.prompt_tokens} prompt tokens, ${(off * 100).toFixed(2)}% off the others' ${ref}`,
        );
    }
  }
  return problems;
}

export interface RegimeVerdict {
  valid: boolean;
  problems: string[];
  best_fair_peer: string | null;
  /** (peer - kvctl) / (peer - ideal) per configuration: the share of the room to the ideal cache kvctl closed. */
  gap_closed: Record<string, number | null>;
  gap_closed_vs_best_fair: number | null;
  ttft_p90_ratio_vs_best_fair: number | null;
  ttft_p90_ratio_vs_admission_only: number | null;
}

const ratio = (a: number | null | undefined, b: number | null | undefined) =>
  a == null || b == null || b === 0 ? null : Math.round((a / b) * 1000) / 1000;

/** The regime's verdict for `kvctl` against the fair peers (best = fewest recomputed tokens). */
export function judge(
  configs: Record<string, ConfigSummary | null>,
  notRun: Record<string, string>,
  fair: readonly string[],
  admissionOnly: string,
  ideal: number | null,
): RegimeVerdict {
  const problems = unfairness(configs, notRun);
  if (!configs.kvctl) problems.push("kvctl did not run");
  const k = configs.kvctl ?? null;
  const gap = (n: string): number | null => {
    const p = configs[n];
    if (!p || !k || ideal === null || p.recomputed_tokens <= ideal) return null;
    return (
      Math.round(
        ((p.recomputed_tokens - k.recomputed_tokens) / (p.recomputed_tokens - ideal)) * 1000,
      ) / 1000
    );
  };
  const gap_closed = Object.fromEntries(
    Object.keys(configs)
      .filter((n) => n !== "kvctl")
      .map((n) => [n, gap(n)]),
  );
  const peers = fair.filter((n) => configs[n]);
  const best = peers.reduce<string | null>(
    (b, n) =>
      b === null ||
      (configs[n] as ConfigSummary).recomputed_tokens <
        (configs[b] as ConfigSummary).recomputed_tokens
        ? n
        : b,
    null,
  );
  const valid = problems.length === 0;
  return {
    valid,
    problems,
    best_fair_peer: valid ? best : null,
    gap_closed,
    gap_closed_vs_best_fair: valid && best ? gap(best) : null,
    ttft_p90_ratio_vs_best_fair:
      valid && best ? ratio(k?.ttft_returning_ms.p90, configs[best]?.ttft_returning_ms.p90) : null,
    ttft_p90_ratio_vs_admission_only: valid
      ? ratio(k?.ttft_returning_ms.p90, configs[admissionOnly]?.ttft_returning_ms.p90)
      : null,
  };
}
