// Per-regime bars: each headline figure of every run side by side, one group per run (a regime:
// its workload, fleet and seed), one bar per configuration and the oracle.
import type { SimConfigFigures, SimConfigResult, SimRunResult } from "../types.js";
import { barOption, HEIGHT, WIDTH } from "./charts.js";
import { count, ms, ratio, ratioTo, sig3 } from "./format.js";
import { type Figure, profileLine, type Section } from "./page.js";
import { ORACLE, type SeriesStyle } from "./style.js";
import { renderSvg } from "./svg.js";

interface Metric {
  key: keyof SimConfigFigures;
  title: string;
  unit: string;
  format: (x: number) => string;
}

const METRICS: Metric[] = [
  { key: "recomputed_tokens", title: "Recomputed prompt tokens", unit: "tokens", format: count },
  { key: "prefill_gpu_s", title: "Prefill GPU time", unit: "GPU-seconds", format: sig3 },
  { key: "ttft_p50_ms", title: "Returning-turn TTFT p50", unit: "ms", format: ms },
  { key: "ttft_p90_ms", title: "Returning-turn TTFT p90", unit: "ms", format: ms },
  { key: "ttft_p99_ms", title: "Returning-turn TTFT p99", unit: "ms", format: ms },
  {
    key: "goodput_programs_per_h",
    title: "Goodput: programs per hour within the TTFT p90 target",
    unit: "programs per hour",
    format: sig3,
  },
];

/** The configuration's (or the oracle's) result in a run, if it ran there. */
export function resultOf(run: SimRunResult, name: string): SimConfigResult | undefined {
  return name === ORACLE ? run.oracle : run.configs[name];
}

/**
 * A short, unique name for each run: its workload and workers, its profile where the runs'
 * differ, and its seed where that is still ambiguous.
 */
export function regimeLabels(runs: SimRunResult[]): string[] {
  const profiles = new Set(runs.map((r) => r.profile.name)).size;
  const base = runs.map(
    (r) => `${r.workload}\n${r.workers} workers${profiles > 1 ? `\n${r.profile.name}` : ""}`,
  );
  const seeded = runs.map((r, i) =>
    base.filter((b) => b === base[i]).length > 1 ? `${base[i]}\nseed ${r.seed}` : base[i],
  );
  return seeded.map((s, i) => (seeded.filter((t) => t === s).length > 1 ? `${s}\n#${i + 1}` : s));
}

/** A regime label as one line of text (on a chart axis it is drawn one part per line). */
export function oneLine(label: string): string {
  return label.replaceAll("\n", " · ");
}

function subtitle(runs: SimRunResult[]): string {
  const lines = [...new Set(runs.map((r) => profileLine(r.profile)))];
  return lines.join("\n");
}

function metricFigure(
  m: Metric,
  runs: SimRunResult[],
  labels: string[],
  styles: SeriesStyle[],
): Figure {
  const id = `regimes-${m.key.replaceAll("_", "-")}`;
  const value = (run: SimRunResult, name: string) => resultOf(run, name)?.[m.key] ?? null;
  const option = barOption(
    { title: m.title, subtitle: subtitle(runs), xName: "regime", yName: m.unit },
    labels,
    styles.map((style) => ({ style, values: runs.map((r) => value(r, style.name)) })),
  );
  const head = ["configuration"];
  for (const label of labels) head.push(oneLine(label), "vs oracle");
  const rows = styles.map((style) => {
    const row = [style.name];
    for (const run of runs) {
      const v = value(run, style.name);
      row.push(v === null ? "—" : m.format(v));
      row.push(v === null ? "—" : ratio(ratioTo(v, run.oracle[m.key])));
    }
    return row;
  });
  return {
    id,
    svg: renderSvg({ id, title: m.title, width: WIDTH, height: HEIGHT, option }),
    table: { caption: `${m.title} (${m.unit})`, head, rows },
  };
}

export function regimeSection(runs: SimRunResult[], styles: SeriesStyle[]): Section {
  const labels = regimeLabels(runs);
  return {
    id: "regimes",
    title: "Per regime",
    intro: [
      "Each run is a regime. Lower is better for every figure but goodput; " +
        "“vs oracle” is the figure divided by the oracle's in the same run.",
    ],
    figures: METRICS.map((m) => metricFigure(m, runs, labels, styles)),
  };
}
