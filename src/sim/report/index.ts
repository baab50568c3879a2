// `kvctl sim`'s HTML report: one self-contained file from one or more runs and, optionally, the
// regime map. Charts are drawn here, in Node, by Apache ECharts' server-side SVG renderer, and
// sit in the page as inline SVG beside a table of the numbers they draw; the page runs no script
// and fetches nothing, so it opens offline and can be mailed. A fixed input gives the same bytes.
import type { SimMapResult, SimRunResult } from "../types.js";
import { count } from "./format.js";
import { page } from "./html.js";
import { checkMap, checkRuns, SimReportInputError } from "./input.js";
import { mapSection } from "./map.js";
import type { Section } from "./page.js";
import { oneLine, regimeLabels, regimeSection } from "./regimes.js";
import { runSection } from "./run.js";
import { ORACLE, seriesStyles } from "./style.js";

export { SimReportInputError };

/** Every configuration of the runs, in the order first met, and the oracle last. */
function seriesNames(runs: SimRunResult[]): string[] {
  return [...new Set(runs.flatMap((r) => Object.keys(r.configs))), ORACLE];
}

function summary(runs: SimRunResult[], map: SimMapResult | undefined): string[] {
  const parts = [];
  if (runs.length > 0) parts.push(`${count(runs.length)} run${runs.length === 1 ? "" : "s"}`);
  if (map) parts.push(`a regime map of ${count(map.cells.length)} cells`);
  return [
    `Simulated by kvctl sim: ${parts.join(" and ")}. Every figure names the GPU profile it was ` +
      "simulated on and how that profile was validated. The oracle replays each trace with " +
      "Belady's eviction over the same capacities: the bound every gap is read against.",
  ];
}

/**
 * The report as one HTML document. Throws SimReportInputError, naming the field, when a result
 * is malformed (a figure not a finite non-negative number, a CDF out of order, more acks than
 * commands, a configuration named "oracle", two map cells on the same axes), before drawing.
 */
export function renderReport(runs: SimRunResult[], map?: SimMapResult): string {
  const checkedRuns = checkRuns(runs);
  const checkedMap = map === undefined ? undefined : checkMap(map);
  if (checkedRuns.length === 0 && !checkedMap)
    throw new SimReportInputError("runs", "nothing to report: no run and no map");
  const styles = seriesStyles(seriesNames(checkedRuns));
  const labels = regimeLabels(checkedRuns);
  const sections: Section[] = [
    ...(checkedRuns.length > 0 ? [regimeSection(checkedRuns, styles)] : []),
    ...checkedRuns.map((run, i) => runSection(run, i, oneLine(labels[i]), styles)),
    ...(checkedMap ? [mapSection(checkedMap)] : []),
  ];
  return page(summary(checkedRuns, checkedMap), sections);
}
