// A run's returning-turn TTFT: its CDF per configuration, and its p90 by the gap before the turn
// and by the turn's prompt length.
import type { SimPercentiles, SimRunResult } from "../types.js";
import { barOption, type CdfSeries, cdfOption, HEIGHT, WIDTH } from "./charts.js";
import { count, ms, ratio, ratioTo } from "./format.js";
import { type Figure, profileLine } from "./page.js";
import { resultOf } from "./regimes.js";
import type { SeriesStyle } from "./style.js";
import { renderSvg } from "./svg.js";

/** A CDF is drawn through the first point at or past each 1/CDF_STEPS of its share. */
const CDF_STEPS = 200;
/** The shares whose first point carries a marker; each is a multiple of 1/CDF_STEPS. */
const MARKED = [0.5, 0.9, 0.99];
/** A log axis has no zero: a TTFT below this is drawn at it. */
const MIN_MS = 0.1;

/** The points a CDF is drawn through, and which of them mark its p50, p90 and p99. */
export function thinCdf(cdf: readonly [number, number][]): Omit<CdfSeries, "style"> {
  const points: [number, number][] = [];
  const marks: number[] = [];
  let step = 0;
  let mark = 0;
  cdf.forEach(([at, share], i) => {
    if (share * CDF_STEPS < step && i < cdf.length - 1) return;
    while (mark < MARKED.length && share >= MARKED[mark]) {
      if (marks.at(-1) !== points.length) marks.push(points.length);
      mark += 1;
    }
    points.push([Math.max(at, MIN_MS), share]);
    step = Math.floor(share * CDF_STEPS) + 1;
  });
  return { points, marks };
}

export function cdfFigure(run: SimRunResult, key: string, styles: SeriesStyle[]): Figure {
  const id = `${key}-cdf`;
  const title = "Returning-turn TTFT, cumulative";
  const present = styles.filter((s) => resultOf(run, s.name));
  const option = cdfOption(
    {
      title,
      subtitle: profileLine(run.profile),
      xName: "TTFT (ms, log scale)",
      yName: "share of returning turns at or below",
    },
    present.map((style) => ({ style, ...thinCdf(resultOf(run, style.name)!.ttft_cdf) })),
  );
  const rows = present.map((s) => {
    const r = resultOf(run, s.name)!;
    return [
      s.name,
      ms(r.ttft_p50_ms),
      ms(r.ttft_p90_ms),
      ms(r.ttft_p99_ms),
      ratio(ratioTo(r.ttft_p90_ms, run.oracle.ttft_p90_ms)),
    ];
  });
  return {
    id,
    svg: renderSvg({ id, title, width: WIDTH, height: HEIGHT, option }),
    table: {
      caption: "Returning-turn TTFT (ms); markers on the chart sit at these percentiles",
      head: ["configuration", "p50", "p90", "p99", "p90 vs oracle"],
      rows,
    },
  };
}

type BucketKey = "ttft_by_gap" | "ttft_by_context";

const BUCKETS: Record<BucketKey, { order: string[]; what: string; axis: string }> = {
  ttft_by_gap: {
    order: ["<10s", "10s-1m", "1-5m", ">5m"],
    what: "the gap before the turn",
    axis: "gap before the turn",
  },
  ttft_by_context: {
    order: ["<8K", "8-32K", "32-64K", ">64K"],
    what: "prompt length",
    axis: "prompt length (tokens)",
  },
};

/** The buckets any result of the run has, the known ones in their natural order first. */
function bucketNames(run: SimRunResult, key: BucketKey, styles: SeriesStyle[]): string[] {
  const found = new Set(styles.flatMap((s) => Object.keys(resultOf(run, s.name)?.[key] ?? {})));
  const known = BUCKETS[key].order.filter((b) => found.has(b));
  return [...known, ...[...found].filter((b) => !known.includes(b))];
}

export function bucketFigure(
  run: SimRunResult,
  key: string,
  bucket: BucketKey,
  styles: SeriesStyle[],
): Figure {
  const id = `${key}-${bucket.replaceAll("_", "-")}`;
  const { what, axis } = BUCKETS[bucket];
  const title = `Returning-turn TTFT p90 by ${what}`;
  const names = bucketNames(run, bucket, styles);
  const cell = (name: string, b: string): SimPercentiles | undefined => {
    const p = resultOf(run, name)?.[bucket][b];
    return p && p.n > 0 ? p : undefined;
  };
  const option = barOption(
    { title, subtitle: profileLine(run.profile), xName: axis, yName: "TTFT p90 (ms)" },
    names,
    styles.map((style) => ({
      style,
      values: names.map((b) => cell(style.name, b)?.p90_ms ?? null),
    })),
  );
  const rows = names.flatMap((b) =>
    styles.map((s) => {
      const p = cell(s.name, b);
      return p
        ? [b, s.name, count(p.n), ms(p.p50_ms), ms(p.p90_ms), ms(p.p99_ms)]
        : [b, s.name, "0", "—", "—", "—"];
    }),
  );
  return {
    id,
    svg: renderSvg({ id, title, width: WIDTH, height: HEIGHT, option }),
    table: {
      caption: `Returning-turn TTFT by ${what} (ms; n: turns)`,
      head: [axis, "configuration", "n", "p50", "p90", "p99"],
      rows,
    },
  };
}
