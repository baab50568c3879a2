// How each series looks, the same in every chart of one report, so a reader learns a
// configuration's colour once. Colour is never the only cue: lines also differ by dash and marker,
// bars by ECharts' decal patterns, heat-map cells carry their number.

/** The name the oracle's series carries in every chart and table. */
export const ORACLE = "oracle";

/** Okabe and Ito's palette (Color Universal Design), yellow last: it is faint on white. */
const COLOURS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442"];
const ORACLE_COLOUR = "#000000";
const DASHES: (string | number[])[] = ["solid", [8, 4], [2, 3], [10, 3, 2, 3], [5, 2], [1, 1]];
const SYMBOLS = ["circle", "rect", "triangle", "diamond", "roundRect", "pin", "arrow"];

export interface SeriesStyle {
  name: string;
  colour: string;
  /** ECharts lineStyle.type: a name or a dash array. */
  dash: string | number[];
  symbol: string;
}

/** One style per name, in the order given; the oracle is black, dashed, with an empty marker. */
export function seriesStyles(names: readonly string[]): SeriesStyle[] {
  const styles: SeriesStyle[] = [];
  let i = 0;
  for (const name of names) {
    if (name === ORACLE) {
      styles.push({ name, colour: ORACLE_COLOUR, dash: [6, 3], symbol: "emptyCircle" });
      continue;
    }
    styles.push({
      name,
      colour: COLOURS[i % COLOURS.length],
      dash: DASHES[i % DASHES.length],
      symbol: SYMBOLS[i % SYMBOLS.length],
    });
    i += 1;
  }
  return styles;
}

/** Viridis, from its light end (at the oracle) to its dark end (far from it). */
export const HEAT_SCALE = ["#fde725", "#7ad151", "#22a884", "#2a788e", "#414487", "#440154"];

/** Where on HEAT_SCALE (0..1) a cell's text turns from black to white to stay readable. */
export const HEAT_TEXT_FLIP = 0.45;
