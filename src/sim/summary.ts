// A run's figures as a table for a terminal (the JSON holds them all).
import type { SimConfigResult, SimRunResult } from "./types.js";

const COLUMNS: [string, (c: SimConfigResult) => string][] = [
  ["recomputed", (c) => String(c.recomputed_tokens)],
  ["prefill GPU-s", (c) => c.prefill_gpu_s.toFixed(2)],
  ["TTFT p50 ms", (c) => c.ttft_p50_ms.toFixed(1)],
  ["p90", (c) => c.ttft_p90_ms.toFixed(1)],
  ["p99", (c) => c.ttft_p99_ms.toFixed(1)],
  ["goodput/h", (c) => c.goodput_programs_per_h.toFixed(1)],
  ["errors", (c) => String(c.errors)],
];

export function simSummary(r: SimRunResult): string {
  const rows = [["", ...COLUMNS.map(([h]) => h)]];
  for (const [name, c] of [...Object.entries(r.configs), ["oracle", r.oracle] as const])
    rows.push([name, ...COLUMNS.map(([, f]) => f(c))]);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  const lines = rows.map((row) =>
    row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join("  "),
  );
  const head =
    `kvctl sim: ${r.workload}, ${r.programs} programs (${r.requests} requests) on ${r.workers} ` +
    `workers, profile ${r.profile.name} (${r.profile.validation}); ${r.simulated_s} s simulated ` +
    `in ${r.wall_s} s`;
  return [head, ...lines].join("\n");
}
