// The report's document model: sections of figures, each figure a chart and the table of the
// numbers it draws. Built from the results first, written as HTML once (html.ts).
import type { SimProfileRef } from "../types.js";

export interface Table {
  caption: string;
  head: string[];
  /** Formatted cells; the first of each row names it. */
  rows: string[][];
}

export interface Figure {
  /** Unique in the report: the figure's anchor and its SVG's id prefix. */
  id: string;
  svg: string;
  table: Table;
}

export interface Section {
  id: string;
  title: string;
  /** Plain-text paragraphs before the figures. */
  intro: string[];
  figures: Figure[];
}

/** What every chart of a result names in its subtitle. */
export function profileLine(p: SimProfileRef): string {
  return `${p.gpu} · ${p.model} · TP ${p.tp} · profile ${p.name} · validated: ${p.validation}`;
}
