// kvctl sim's HTML report (src/sim/report) on fixed results (test/fixtures/sim-report: invented
// figures of a realistic shape, six configurations and the oracle): what each chart holds is read
// back from the SVG ECharts drew, not from the input; the page loads nothing; a fixed input gives
// the same bytes, in this process and in a fresh one; bad input is refused naming its field.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { renderReport, SimReportInputError } from "../src/sim/report/index.js";
import { thinCdf } from "../src/sim/report/run-ttft.js";
import type { SimMapResult, SimRunResult } from "../src/sim/types.js";

const FIXTURES = join(import.meta.dirname, "fixtures", "sim-report");
const load = <T>(name: string): T => JSON.parse(readFileSync(join(FIXTURES, name), "utf8"));
const fleet = () => load<SimRunResult>("run-fleet.json");
const longContext = () => load<SimRunResult>("run-long-context.json");
const map = () => load<SimMapResult>("map.json");

const CONFIGS = ["kvctl", "session_radix", "thunder", "cache_aware", "lru", "dynamo_kv"];

interface Element {
  tag: string;
  attrs: Record<string, string>;
  /** Text up to the next tag (a <text> element's content). */
  text: string;
}

/** The elements of an SVG, in document order, with their attributes and immediate text. */
function elements(svg: string): Element[] {
  const out: Element[] = [];
  for (const m of svg.matchAll(/<([a-zA-Z]+)((?:\s+[\w:-]+="[^"]*")*)\s*\/?>([^<]*)/g)) {
    const attrs: Record<string, string> = {};
    for (const a of m[2].matchAll(/([\w:-]+)="([^"]*)"/g)) attrs[a[1]] = a[2];
    out.push({ tag: m[1], attrs, text: m[3] });
  }
  return out;
}

const unescapeXml = (s: string) =>
  s
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&amp;", "&");

/** Series drawn in a chart: the legend's names by series index, and the indices with marks. */
function seriesOf(svg: string): { legend: Map<number, string>; marked: Set<number> } {
  const els = elements(svg);
  const legend = new Map<number, string>();
  const marked = new Set<number>();
  for (const e of els) {
    const index = Number(e.attrs.ecmeta_series_index);
    if (e.attrs.ecmeta_ssr_type === "chart") marked.add(index);
    if (e.attrs.ecmeta_ssr_type !== "legend") continue;
    // A legend item's label is the <text> drawn at the item's own position (a long one wraps
    // into several lines there).
    const lines = els.filter((t) => t.tag === "text" && t.attrs.transform === e.attrs.transform);
    if (lines.length > 0) legend.set(index, lines.map((t) => unescapeXml(t.text)).join(""));
  }
  return { legend, marked };
}

interface Chart {
  figureId: string;
  svg: string;
  table: string;
}

function charts(html: string): Chart[] {
  return [
    ...html.matchAll(/<figure id="([^"]+)">\n(<svg[\s\S]*?<\/svg>)\n([\s\S]*?)<\/figure>/g),
  ].map((m) => ({ figureId: m[1], svg: m[2], table: m[3] }));
}

const report = renderReport([fleet(), longContext()], map());

describe("the sim report's charts", () => {
  it("draws every figure: six per-regime bars, five per run, two regime-map heat maps", () => {
    const ids = charts(report).map((c) => c.figureId);
    expect(ids.filter((id) => id.startsWith("regimes-"))).toHaveLength(6);
    for (const run of ["run1", "run2"])
      expect(ids.filter((id) => id.startsWith(`${run}-`)).sort()).toEqual(
        [
          `${run}-bytes`,
          `${run}-cdf`,
          `${run}-commands`,
          `${run}-ttft-by-context`,
          `${run}-ttft-by-gap`,
        ].sort(),
      );
    expect(ids.filter((id) => id.startsWith("map-"))).toHaveLength(2);
    expect(ids).toHaveLength(new Set(ids).size);
  });

  it("holds one series per configuration plus the oracle in each run chart, read from the SVG", () => {
    const runCharts = charts(report).filter((c) => !c.figureId.startsWith("map-"));
    expect(runCharts).toHaveLength(16);
    for (const c of runCharts) {
      const { legend, marked } = seriesOf(c.svg);
      const names = [...legend.keys()].sort((a, b) => a - b).map((i) => legend.get(i));
      expect(names, c.figureId).toEqual([...CONFIGS, "oracle"]);
      // Every series in the legend has marks drawn in the plot, and nothing else does.
      expect(
        [...marked].sort((a, b) => a - b),
        c.figureId,
      ).toEqual([0, 1, 2, 3, 4, 5, 6]);
    }
  });

  it("draws each CDF's p50, p90 and p99 as markers: three per configuration", () => {
    for (const id of ["run1-cdf", "run2-cdf"]) {
      const svg = charts(report).find((c) => c.figureId === id)!.svg;
      const marks = elements(svg).filter((e) => e.attrs.ecmeta_ssr_type === "chart");
      for (let s = 0; s < 7; s++)
        expect(
          marks.filter((e) => e.attrs.ecmeta_series_index === String(s)),
          `${id} ${s}`,
        ).toHaveLength(3);
    }
  });

  it("holds one panel per map configuration (kvctl, best peer), a cell for each of the 48 cells", () => {
    for (const id of ["map-ttft-p90-ms", "map-gpu-s-per-program"]) {
      const svg = charts(report).find((c) => c.figureId === id)!.svg;
      const cells = elements(svg).filter((e) => e.attrs.ecmeta_ssr_type === "chart");
      expect(
        cells.filter((e) => e.attrs.ecmeta_series_index === "0"),
        id,
      ).toHaveLength(48);
      expect(
        cells.filter((e) => e.attrs.ecmeta_series_index === "1"),
        id,
      ).toHaveLength(48);
      expect(new Set(cells.map((e) => e.attrs.ecmeta_series_index)), id).toEqual(
        new Set(["0", "1"]),
      );
      const texts = elements(svg)
        .filter((e) => e.tag === "text")
        .map((e) => unescapeXml(e.text));
      expect(texts).toContain("kvctl ÷ oracle");
      expect(texts).toContain("best peer ÷ oracle (the peer named in the cell)");
      // The best peer of each cell is named in it.
      expect(texts.filter((t) => t === "cache_aware").length).toBeGreaterThan(0);
    }
  });

  it("names the profile (GPU, model, TP, validation) on every chart, inside the SVG", () => {
    const all = charts(report);
    expect(all).toHaveLength(18);
    for (const c of all) {
      const texts = elements(c.svg)
        .map((e) => unescapeXml(e.text))
        .join("\n");
      const profiles =
        c.figureId.startsWith("run2-") || c.figureId.startsWith("map-")
          ? [longContext().profile]
          : c.figureId.startsWith("run1-")
            ? [fleet().profile]
            : [fleet().profile, longContext().profile];
      for (const p of profiles) {
        expect(texts, c.figureId).toContain(`${p.gpu} · ${p.model} · TP ${p.tp}`);
        expect(texts, c.figureId).toContain(`validated: ${p.validation}`);
      }
      expect(elements(c.svg)[0].attrs["aria-labelledby"], c.figureId).toBe(`${c.figureId}-title`);
    }
  });

  it("puts a table of the drawn numbers beside each chart, with every configuration in it", () => {
    for (const c of charts(report)) {
      expect(c.table, c.figureId).toMatch(/^<div class="numbers"><table><caption>/);
      if (c.figureId.startsWith("map-")) {
        expect(c.table.match(/<tr><th scope="row">/g), c.figureId).toHaveLength(48);
        continue;
      }
      for (const name of [...CONFIGS, "oracle"])
        expect(c.table, `${c.figureId} ${name}`).toMatch(
          new RegExp(`<t[hd]( scope="row")?>${name}</t[hd]>`),
        );
    }
    const p90 = charts(report).find((c) => c.figureId === "regimes-ttft-p90-ms")!.table;
    const kvctl = fleet().configs.kvctl.ttft_p90_ms;
    expect(kvctl).toBe(1173.3);
    expect(p90).toContain('<tr><th scope="row">kvctl</th><td>1,173</td><td>7.68x</td>');
  });

  it("counts commands unanswered as sent less every ack", () => {
    const run = fleet();
    run.configs.kvctl.commands = { Cache: { sent: 10, acked: { applied: 6, rejected: 1 } } };
    const html = renderReport([run]);
    const table = charts(html).find((c) => c.figureId === "run1-commands")!.table;
    const head =
      '<th scope="col">configuration</th><th scope="col">command</th><th scope="col">sent</th>' +
      ["applied", "partial", "noop", "duplicate", "rejected", "error", "unanswered"]
        .map((s) => `<th scope="col">${s}</th>`)
        .join("");
    expect(table).toContain(head);
    expect(table).toContain(
      '<tr><th scope="row">kvctl</th><td>Cache</td><td>10</td><td>6</td><td>0</td><td>0</td><td>0</td><td>1</td><td>0</td><td>3</td></tr>',
    );
  });
});

describe("the sim report as a file", () => {
  it("references nothing outside itself and runs no script", () => {
    expect(report.startsWith("<!DOCTYPE html>")).toBe(true);
    for (const tag of [
      "script",
      "link",
      "iframe",
      "object",
      "embed",
      "img",
      "base",
      "image",
      "use",
    ])
      expect(report, tag).not.toMatch(new RegExp(`<${tag}[\\s>]`, "i"));
    expect(report).not.toMatch(/@import/i);
    const refs = [
      ...report.matchAll(/\s(href|src|xlink:href|srcset|action|poster|data)="([^"]*)"/gi),
    ];
    expect(refs.length).toBeGreaterThan(0);
    for (const [, attr, value] of refs) expect(value, attr).toMatch(/^#[\w-]+$/);
    const urls = [...report.matchAll(/url\(([^)]*)\)/g)];
    expect(urls.length).toBeGreaterThan(0);
    for (const [, target] of urls) expect(target).toMatch(/^#[\w-]+$/);
    // Every fragment points at an element of this page.
    const ids = new Set([...report.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]));
    for (const [, , value] of refs) expect(ids.has(value.slice(1)), value).toBe(true);
    for (const [, target] of urls) expect(ids.has(target.slice(1)), target).toBe(true);
    // The only absolute URLs are XML namespace names, which nothing fetches.
    for (const m of report.matchAll(/\s([\w:-]+)="(https?:[^"]*)"/g))
      expect(m[1]).toMatch(/^xmlns(:\w+)?$/);
    expect(report.replaceAll(/\sxmlns(:\w+)?="[^"]*"/g, "")).not.toMatch(/https?:/);
  });

  it("gives ids unique across the page's SVGs", () => {
    const ids = [...report.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]);
    expect(ids.length).toBeGreaterThan(40);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("is byte-identical across renders, in this process and in a fresh one", () => {
    // Another chart drawn in between moves ECharts' process-wide counters.
    renderReport([longContext()]);
    expect(renderReport([fleet(), longContext()], map())).toBe(report);
    const script =
      'import { readFileSync } from "node:fs";' +
      'import { renderReport } from "./src/sim/report/index.ts";' +
      `const f = (n) => JSON.parse(readFileSync(${JSON.stringify(FIXTURES)} + "/" + n, "utf8"));` +
      'process.stdout.write(renderReport([f("run-fleet.json"), f("run-long-context.json")], f("map.json")));';
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        cwd: join(import.meta.dirname, ".."),
        encoding: "utf8",
        maxBuffer: 64 << 20,
      },
    );
    expect(child.stderr).toBe("");
    expect(child.stdout).toBe(report);
  }, 60_000);

  it("escapes what the results name: a configuration cannot inject markup", () => {
    const run = fleet();
    run.configs['<script>alert("x")</script>'] = run.configs.lru;
    delete (run.configs as Record<string, unknown>).lru;
    const html = renderReport([run]);
    expect(html).not.toContain("<script");
    expect(html).toContain("&lt;script&gt;");
    const { legend } = seriesOf(charts(html).find((c) => c.figureId === "run1-cdf")!.svg);
    expect([...legend.values()]).toContain('<script>alert("x")</script>');
  });

  it("renders a run alone and a map alone", () => {
    const runOnly = renderReport([fleet()]);
    expect(charts(runOnly).map((c) => c.figureId)).not.toContain("map-ttft-p90-ms");
    expect(charts(runOnly)).toHaveLength(11);
    const mapOnly = renderReport([], map());
    expect(charts(mapOnly).map((c) => c.figureId)).toEqual([
      "map-ttft-p90-ms",
      "map-gpu-s-per-program",
    ]);
  });
});

describe("the sim report refuses bad input, naming the field", () => {
  const refused = (runs: unknown[], m?: unknown): SimReportInputError => {
    try {
      renderReport(runs as SimRunResult[], m as SimMapResult | undefined);
    } catch (e) {
      expect(e).toBeInstanceOf(SimReportInputError);
      return e as SimReportInputError;
    }
    throw new Error("the input was accepted");
  };

  it("a figure that is not a finite non-negative number", () => {
    const run = fleet();
    run.configs.lru.ttft_p90_ms = Number.NaN;
    expect(refused([run]).field).toBe("runs[0].configs.lru.ttft_p90_ms");
    const neg = longContext();
    neg.oracle.bytes_moved.h2d = -1;
    expect(refused([fleet(), neg]).field).toBe("runs[1].oracle.bytes_moved.h2d");
  });

  it("a missing field, and percentiles out of order", () => {
    const run = fleet() as unknown as Record<string, unknown>;
    delete run.profile;
    expect(refused([run]).field).toBe("runs[0].profile");
    const p = fleet();
    p.configs.thunder.ttft_by_gap["1-5m"].p99_ms = 1;
    const e = refused([p]);
    expect(e.field).toBe("runs[0].configs.thunder.ttft_by_gap.1-5m");
    expect(e.message).toContain("p99_ms is below p90_ms");
  });

  it("a CDF out of order or a share above 1", () => {
    const run = fleet();
    const cdf = run.configs.kvctl.ttft_cdf;
    [cdf[3], cdf[4]] = [cdf[4], cdf[3]];
    expect(refused([run]).field).toBe("runs[0].configs.kvctl.ttft_cdf[4]");
    const high = fleet();
    high.oracle.ttft_cdf[2] = [10, 1.5];
    expect(refused([high]).field).toBe("runs[0].oracle.ttft_cdf[2][1]");
  });

  it("more acks than commands sent, and a configuration named oracle", () => {
    const run = fleet();
    run.configs.kvctl.commands.Cache = { sent: 2, acked: { applied: 3 } };
    expect(refused([run]).message).toBe(
      "runs[0].configs.kvctl.commands.Cache.acked: 3 acks for 2 commands sent",
    );
    const named = fleet();
    named.configs.oracle = named.configs.lru;
    expect(refused([named]).field).toBe("runs[0].configs.oracle");
  });

  it("two map cells on the same axes, an empty map, and nothing at all", () => {
    const m = map();
    m.cells.push({ ...m.cells[5] });
    expect(refused([], m).message).toBe("map.cells[48]: the same axes as map.cells[5]");
    expect(refused([], { ...map(), cells: [] }).field).toBe("map.cells");
    expect(refused([]).message).toBe("runs: nothing to report: no run and no map");
    const bad = map() as unknown as { cells: Record<string, unknown>[] };
    bad.cells[7].gaps = "hours";
    expect(refused([], bad).field).toBe("map.cells[7].gaps");
  });
});

describe("thinCdf", () => {
  it("keeps the first point, the first at each 1/200 of share, and marks p50/p90/p99", () => {
    const cdf: [number, number][] = Array.from({ length: 5000 }, (_, i) => [i + 1, (i + 1) / 5000]);
    const { points, marks } = thinCdf(cdf);
    expect(points).toHaveLength(201);
    expect(points.at(-1)).toEqual([5000, 1]);
    expect(marks.map((i) => points[i])).toEqual([
      [2500, 0.5],
      [4500, 0.9],
      [4950, 0.99],
    ]);
    // Never further than one step of share from the full CDF at a kept point's time.
    for (const [at, share] of points) expect(Math.abs(share - at / 5000)).toBeLessThan(1e-12);
  });

  it("marks a point once when it passes several percentiles, and draws 0 ms on the log axis", () => {
    const { points, marks } = thinCdf([
      [0, 0.2],
      [40, 0.995],
      [900, 1],
    ]);
    expect(points).toEqual([
      [0.1, 0.2],
      [40, 0.995],
      [900, 1],
    ]);
    expect(marks).toEqual([1]);
  });
});
