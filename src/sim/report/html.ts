// The sections as one HTML document: inline CSS, inline SVG, no script, nothing fetched.
import { escapeHtml } from "./format.js";
import type { Figure, Section, Table } from "./page.js";
import { ECHARTS_VERSION } from "./svg.js";

const CSS = `
:root { color: #1a1a1a; background: #ffffff; font: 15px/1.45 system-ui, sans-serif; }
body { margin: 0 auto; padding: 24px; max-width: 1500px; }
h1 { font-size: 1.6rem; margin: 0 0 4px; }
h2 { font-size: 1.3rem; margin: 40px 0 8px; padding-top: 8px; border-top: 2px solid #d0d0d0; }
nav ul { margin: 4px 0; padding-left: 20px; }
a { color: #0b5cad; }
figure { display: flex; flex-wrap: wrap; gap: 16px 24px; align-items: flex-start; margin: 24px 0; }
figure svg { max-width: 100%; height: auto; flex: 0 1 auto; }
.numbers { flex: 1 1 380px; max-height: 520px; overflow: auto; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding-bottom: 4px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e2e2e2; white-space: nowrap; }
thead th { position: sticky; top: 0; background: #f2f2f2; text-align: right; }
thead th:first-child, tbody th { text-align: left; font-weight: 500; }
td { text-align: right; }
tbody tr:nth-child(even) { background: #f8f8f8; }
footer { margin-top: 40px; color: #444444; font-size: 13px; }
`;

function table(t: Table): string {
  const head = t.head.map((h) => `<th scope="col">${escapeHtml(h)}</th>`).join("");
  const rows = t.rows
    .map(([first, ...rest]) => {
      const cells = rest.map((c) => `<td>${escapeHtml(c)}</td>`).join("");
      return `<tr><th scope="row">${escapeHtml(first)}</th>${cells}</tr>`;
    })
    .join("\n");
  return (
    `<table><caption>${escapeHtml(t.caption)}</caption>\n<thead><tr>${head}</tr></thead>\n` +
    `<tbody>\n${rows}\n</tbody></table>`
  );
}

function figure(f: Figure): string {
  return `<figure id="${f.id}">\n${f.svg}\n<div class="numbers">${table(f.table)}</div>\n</figure>`;
}

function section(s: Section): string {
  const intro = s.intro.map((p) => `<p>${escapeHtml(p)}</p>`).join("\n");
  const figures = s.figures.map(figure).join("\n");
  return `<section id="${s.id}">\n<h2>${escapeHtml(s.title)}</h2>\n${intro}\n${figures}\n</section>`;
}

function contents(sections: Section[]): string {
  const items = sections.map((s) => `<li><a href="#${s.id}">${escapeHtml(s.title)}</a></li>`);
  return `<nav aria-label="Contents"><ul>\n${items.join("\n")}\n</ul></nav>`;
}

/** The whole report. `summary` is plain text under the heading. */
export function page(summary: string[], sections: Section[]): string {
  return [
    "<!DOCTYPE html>",
    '<html lang="en">',
    '<head>\n<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    "<title>kvctl sim report</title>",
    `<style>${CSS}</style>\n</head>`,
    "<body>",
    "<header>\n<h1>kvctl sim report</h1>",
    ...summary.map((p) => `<p>${escapeHtml(p)}</p>`),
    `${contents(sections)}\n</header>`,
    "<main>",
    ...sections.map(section),
    "</main>",
    `<footer><p>Charts drawn by Apache ECharts ${escapeHtml(ECHARTS_VERSION)} when the report ` +
      "was written, as inline SVG: this file runs no script and loads nothing.</p></footer>",
    "</body>",
    "</html>",
    "",
  ].join("\n");
}
