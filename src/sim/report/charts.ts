// The report's three kinds of chart as ECharts options: grouped bars, CDF lines and the regime
// map's heat map. Every chart carries a title, the profile it was simulated on as its subtitle,
// axis names with units, and a legend (the heat map's is its colour scale); series are silent,
// since nothing in a static page reacts to a pointer.
import type { EChartsOption } from "echarts";
import { short } from "./format.js";
import { HEAT_SCALE, HEAT_TEXT_FLIP, type SeriesStyle } from "./style.js";

export const WIDTH = 760;
export const HEIGHT = 420;

export interface Frame {
  title: string;
  /** Names the profile: the GPU, model, TP and how the timing was validated. */
  subtitle: string;
  xName: string;
  yName: string;
}

const TEXT = "#1a1a1a";
const MUTED = "#444444";

/** Bars get ECharts' decal patterns, a second cue beside colour; heat-map cells carry numbers. */
function frame(f: Frame, width: number, decals: boolean): EChartsOption {
  return {
    aria: { enabled: true, decal: { show: decals } },
    textStyle: { fontFamily: "sans-serif", color: TEXT },
    title: {
      text: f.title,
      subtext: f.subtitle,
      left: 12,
      top: 8,
      textStyle: { fontSize: 15, color: TEXT },
      subtextStyle: { fontSize: 11, color: MUTED, width: width - 24, overflow: "break" },
    },
  };
}

/** The plot's top edge: below the title and each line of the subtitle. */
function plotTop(f: Frame): number {
  return 78 + 14 * f.subtitle.split("\n").length;
}

function legend(f: Frame): object {
  return {
    orient: "vertical",
    right: 8,
    top: plotTop(f),
    selectedMode: false,
    // A long configuration name wraps inside the legend's column instead of leaving the chart.
    textStyle: { fontSize: 12, color: TEXT, width: 112, overflow: "breakAll" },
  };
}

const GRID = { left: 78, right: 150 };
const AXIS_NAME = { fontSize: 12, color: TEXT };

/** Pixels per character of a 12 px label, as ECharts' server-side text measure counts them. */
const CHAR_PX = 7;

/**
 * Category names side by side while their longest line fits its slot, slanted when it would run
 * into the next one, with the room below the plot they need either way.
 */
function categoryAxis(categories: string[]): { axisLabel: object; bottom: number } {
  const slot = (WIDTH - GRID.left - GRID.right) / Math.max(1, categories.length);
  const lines = categories.map((c) => c.split("\n"));
  const widest = Math.max(0, ...lines.flat().map((l) => l.length)) * CHAR_PX;
  const tall = Math.max(1, ...lines.map((l) => l.length));
  if (widest <= slot) return { axisLabel: { interval: 0 }, bottom: 44 + 16 * tall };
  return { axisLabel: { interval: 0, rotate: 30 }, bottom: 50 + Math.ceil(widest / 2) };
}

export interface BarSeries {
  style: SeriesStyle;
  /** One per category; null draws no bar (no figure for that category). */
  values: (number | null)[];
}

/** Grouped bars: one group per category, one bar per series. */
export function barOption(f: Frame, categories: string[], series: BarSeries[]): EChartsOption {
  const { axisLabel, bottom } = categoryAxis(categories);
  return {
    ...frame(f, WIDTH, true),
    legend: legend(f),
    grid: { ...GRID, top: plotTop(f), bottom },
    xAxis: {
      type: "category",
      data: categories,
      name: f.xName,
      nameLocation: "middle",
      nameGap: bottom - 24,
      nameTextStyle: AXIS_NAME,
      axisLabel,
    },
    yAxis: {
      type: "value",
      name: f.yName,
      nameLocation: "middle",
      nameGap: 58,
      nameTextStyle: AXIS_NAME,
      axisLabel: { formatter: short },
    },
    series: series.map((s) => ({
      type: "bar",
      name: s.style.name,
      silent: true,
      data: s.values,
      barMaxWidth: 26,
      itemStyle: { color: s.style.colour },
    })),
  };
}

export interface CdfSeries {
  style: SeriesStyle;
  /** [ms, share at or below] ascending. */
  points: [number, number][];
  /** Indices of `points` that carry a marker (where the p50, p90 and p99 are reached). */
  marks: number[];
}

/** Empirical CDFs as step lines over a logarithmic time axis. */
export function cdfOption(f: Frame, series: CdfSeries[]): EChartsOption {
  return {
    ...frame(f, WIDTH, false),
    legend: legend(f),
    grid: { ...GRID, top: plotTop(f), bottom: 60 },
    xAxis: {
      type: "log",
      name: f.xName,
      nameLocation: "middle",
      nameGap: 32,
      nameTextStyle: AXIS_NAME,
      axisLabel: { formatter: short },
    },
    yAxis: {
      type: "value",
      min: 0,
      max: 1,
      name: f.yName,
      nameLocation: "middle",
      nameGap: 50,
      nameTextStyle: AXIS_NAME,
      axisLabel: { formatter: (v: number) => `${Math.round(v * 100)}%` },
    },
    series: series.map((s) => {
      const marked = new Set(s.marks);
      return {
        type: "line",
        name: s.style.name,
        silent: true,
        step: "end",
        symbol: s.style.symbol,
        symbolSize: 8,
        showSymbol: true,
        data: s.points.map((p, i) => (marked.has(i) ? p : { value: p, symbol: "none" })),
        lineStyle: { color: s.style.colour, type: s.style.dash, width: 2 },
        itemStyle: { color: s.style.colour },
      };
    }),
  } as EChartsOption;
}

export interface HeatPanel {
  /** The series' name (the configuration whose figure the cells hold). */
  name: string;
  /** Printed above the panel. */
  heading: string;
  cells: { x: number; y: number; value: number; label: string }[];
}

export const HEAT_WIDTH = 1200;
export const HEAT_HEIGHT = 560;
const HEAT_LEFT = 210;
const HEAT_GAP = 24;
const HEAT_TOP = 118;
const HEAT_BOTTOM = 104;

/** Side-by-side heat maps over the same axes and one colour scale, one panel per series. */
export function heatOption(
  f: Frame,
  xs: string[],
  ys: string[],
  panels: HeatPanel[],
  range: [number, number],
): EChartsOption {
  const panelWidth = (HEAT_WIDTH - HEAT_LEFT - 20 - HEAT_GAP * (panels.length - 1)) / panels.length;
  const left = (i: number) => HEAT_LEFT + i * (panelWidth + HEAT_GAP);
  const base = frame(f, HEAT_WIDTH, false);
  return {
    ...base,
    title: [
      base.title as object,
      ...panels.map((p, i) => ({
        text: p.heading,
        left: left(i),
        top: HEAT_TOP - 26,
        textStyle: { fontSize: 13, color: TEXT },
      })),
    ],
    grid: panels.map((_, i) => ({
      left: left(i),
      width: panelWidth,
      top: HEAT_TOP,
      bottom: HEAT_BOTTOM,
    })),
    xAxis: panels.map((_, i) => ({
      type: "category",
      gridIndex: i,
      data: xs,
      name: f.xName,
      nameLocation: "middle",
      nameGap: 44,
      nameTextStyle: AXIS_NAME,
      axisLabel: { interval: 0, fontSize: 11, lineHeight: 14 },
    })),
    yAxis: panels.map((_, i) => ({
      type: "category",
      gridIndex: i,
      data: ys,
      inverse: true,
      axisLabel: { show: i === 0, interval: 0, fontSize: 11 },
    })),
    visualMap: heatScale(range, panels.length),
    series: panels.map((p, i) => heatSeries(p, i, range)),
  } as EChartsOption;
}

function heatScale(range: [number, number], panels: number): object {
  return {
    type: "continuous",
    min: range[0],
    max: range[1],
    seriesIndex: Array.from({ length: panels }, (_, i) => i),
    inRange: { color: HEAT_SCALE },
    orient: "horizontal",
    left: "center",
    bottom: 8,
    itemWidth: 14,
    itemHeight: 260,
    precision: 2,
    calculable: false,
    text: [
      `${range[1].toFixed(2)}x: far from the oracle`,
      `${range[0].toFixed(2)}x: at the oracle`,
    ],
    textStyle: { fontSize: 12, color: TEXT },
  };
}

function heatSeries(p: HeatPanel, i: number, [min, max]: [number, number]): object {
  const span = max - min || 1;
  return {
    type: "heatmap",
    name: p.name,
    silent: true,
    xAxisIndex: i,
    yAxisIndex: i,
    data: p.cells.map((c) => ({
      value: [c.x, c.y, c.value],
      label: {
        show: true,
        formatter: c.label,
        fontSize: 10,
        lineHeight: 13,
        color: (c.value - min) / span > HEAT_TEXT_FLIP ? "#ffffff" : "#000000",
      },
    })),
    itemStyle: { borderColor: "#ffffff", borderWidth: 1 },
  };
}
