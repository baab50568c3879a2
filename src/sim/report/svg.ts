// One ECharts option in, one self-contained SVG string out: Apache ECharts' server-side renderer
// (`ssr: true`, `renderToSVGString`) draws it in this process, synchronously, with no DOM and no
// script in the result.
import { createRequire } from "node:module";
import type * as ECharts from "echarts";
import type { EChartsOption } from "echarts";
import { escapeHtml } from "./format.js";

// ECharts' ES modules live in a package without `"type": "module"`, which Node releases before
// 20.19 refuse to import; its CommonJS bundle loads on every Node the engines field allows.
const echarts = createRequire(import.meta.url)("echarts") as typeof ECharts;

/** The version of ECharts that drew the charts (named in the report's footer). */
export const ECHARTS_VERSION: string = echarts.version;

export interface ChartSpec {
  /** Unique within one report: it prefixes the SVG's ids and anchors the figure. */
  id: string;
  /** The accessible name of the SVG (its `<title>`). */
  title: string;
  width: number;
  height: number;
  option: EChartsOption;
}

/** The chart as an `<svg>` element with a `<title>`, its ids prefixed by `spec.id`. */
export function renderSvg(spec: ChartSpec): string {
  const chart = echarts.init(null, null, {
    renderer: "svg",
    ssr: true,
    width: spec.width,
    height: spec.height,
  });
  let svg: string;
  try {
    chart.setOption({ animation: false, ...spec.option });
    svg = chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
  return withTitle(renumberIds(svg, spec.id), spec.id, spec.title);
}

// zrender names its clip paths, patterns, gradients and CSS classes from counters global to the
// process (`zr3-c0`, `zr3-cls-17`), so the same chart drawn twice would differ, and two charts
// of one page could share an id. Each such name is renamed by its first appearance in this SVG.
const ZR_NAME = /(id="|url\(#|class="|\n\.)zr\d+-([a-z-]*?)(\d+)\b/g;

function renumberIds(svg: string, prefix: string): string {
  const names = new Map<string, string>();
  const perKind = new Map<string, number>();
  return svg.replace(ZR_NAME, (_match, lead: string, kind: string, n: string) => {
    const key = `${kind}${n}`;
    let name = names.get(key);
    if (name === undefined) {
      const k = perKind.get(kind) ?? 0;
      perKind.set(kind, k + 1);
      name = `${prefix}-${kind}${k}`;
      names.set(key, name);
    }
    return lead + name;
  });
}

function withTitle(svg: string, id: string, title: string): string {
  if (!svg.startsWith("<svg ")) throw new Error("ECharts returned no <svg> element");
  const open = svg.indexOf(">") + 1;
  return (
    `<svg role="img" aria-labelledby="${id}-title" ${svg.slice(5, open)}` +
    `<title id="${id}-title">${escapeHtml(title)}</title>${svg.slice(open)}`
  );
}
