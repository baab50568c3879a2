// The regime map: every cell (workers x KV oversubscription x context x gaps x flood) as a heat
// map of kvctl's and the best peer's figure divided by the oracle's, one chart per figure.
import type { SimMapCell, SimMapResult } from "../types.js";
import { HEAT_HEIGHT, HEAT_WIDTH, type HeatPanel, heatOption } from "./charts.js";
import { count, ms, ratio, ratioTo, sig3 } from "./format.js";
import { type Figure, profileLine, type Section } from "./page.js";
import { renderSvg } from "./svg.js";

type MapFigure = "ttft_p90_ms" | "gpu_s_per_program";

const FIGURES: { key: MapFigure; title: string; unit: string; format: (x: number) => string }[] = [
  { key: "ttft_p90_ms", title: "Returning-turn TTFT p90", unit: "ms", format: ms },
  { key: "gpu_s_per_program", title: "GPU-seconds per program", unit: "GPU-s", format: sig3 },
];

function contextLabel(tokens: number): string {
  return tokens % 1024 === 0 ? `${tokens / 1024}K` : count(tokens);
}

const column = (c: SimMapCell) => `${c.oversubscription}x KV\n${contextLabel(c.context)} context`;
const row = (c: SimMapCell) =>
  `${c.workers} workers · ${c.gaps === "minutes" ? "minute" : "second"} gaps · flood ${c.flood ? "on" : "off"}`;
const cellName = (c: SimMapCell) => `${row(c)} · ${column(c).replace("\n", " · ")}`;

/** Distinct labels of the cells, ordered by the numbers and flags behind them. */
function axis(
  cells: SimMapCell[],
  label: (c: SimMapCell) => string,
  order: (c: SimMapCell) => number[],
) {
  const sorted = [...cells].sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    const i = x.findIndex((v, k) => v !== y[k]);
    return i < 0 ? 0 : x[i] - y[i];
  });
  return [...new Set(sorted.map(label))];
}

function panels(map: SimMapResult, key: MapFigure, xs: string[], ys: string[]): HeatPanel[] {
  const place = (c: SimMapCell) => ({ x: xs.indexOf(column(c)), y: ys.indexOf(row(c)) });
  const cellsOf = (pick: (c: SimMapCell) => number, name: (c: SimMapCell) => string | null) =>
    map.cells.flatMap((c) => {
      const value = ratioTo(pick(c), c.oracle[key]);
      if (value === null) return [];
      const peer = name(c);
      return [{ ...place(c), value, label: value.toFixed(2) + (peer ? `\n${peer}` : "") }];
    });
  return [
    {
      name: "kvctl",
      heading: "kvctl ÷ oracle",
      cells: cellsOf(
        (c) => c.kvctl[key],
        () => null,
      ),
    },
    {
      name: "best peer",
      heading: "best peer ÷ oracle (the peer named in the cell)",
      cells: cellsOf(
        (c) => c.best_peer[key],
        (c) => c.best_peer.name,
      ),
    },
  ];
}

function mapFigure(map: SimMapResult, f: (typeof FIGURES)[number]): Figure {
  const id = `map-${f.key.replaceAll("_", "-")}`;
  const title = `Regime map: ${f.title}, as a ratio to the oracle`;
  const xs = axis(map.cells, column, (c) => [c.oversubscription, c.context]);
  const ys = axis(map.cells, row, (c) => [c.workers, c.gaps === "minutes" ? 1 : 0, +c.flood]);
  const ps = panels(map, f.key, xs, ys);
  const values = ps.flatMap((p) => p.cells.map((c) => c.value));
  const low = Math.min(1, ...values);
  const range: [number, number] = [low, Math.max(low + 0.1, ...values)];
  const frame = {
    title,
    subtitle: profileLine(map.profile),
    xName: "KV oversubscription · context length",
    yName: "",
  };
  const option = heatOption(frame, xs, ys, ps, range);
  const rows = map.cells.map((c) => [
    cellName(c),
    c.families.join(", ") || "—",
    c.best_peer.name,
    f.format(c.kvctl[f.key]),
    f.format(c.best_peer[f.key]),
    f.format(c.oracle[f.key]),
    ratio(ratioTo(c.kvctl[f.key], c.oracle[f.key])),
    ratio(ratioTo(c.best_peer[f.key], c.oracle[f.key])),
  ]);
  return {
    id,
    svg: renderSvg({ id, title, width: HEAT_WIDTH, height: HEAT_HEIGHT, option }),
    table: {
      caption: `${f.title} per cell (${f.unit}; medians over the seeds)`,
      head: [
        "cell",
        "families",
        "best peer",
        "kvctl",
        "best peer",
        "oracle",
        "kvctl ÷ oracle",
        "peer ÷ oracle",
      ],
      rows,
    },
  };
}

export function mapSection(map: SimMapResult): Section {
  return {
    id: "map",
    title: "Regime map",
    intro: [
      `${count(map.cells.length)} cells, ${count(map.programs_per_cell)} programs each, ` +
        `seeds ${map.seeds.join(", ")}; each figure is the median over the seeds. ` +
        "A ratio of 1.00 matches the oracle; each cell names the peer the map run found best there.",
      `Profile: ${profileLine(map.profile)}.`,
    ],
    figures: FIGURES.map((f) => mapFigure(map, f)),
  };
}
