// The cpu profile's tables from the measured samples: medians per cell, how noisy each cell was,
// and the prefill cells no real batch can take (more new tokens than SGLang's chunked-prefill
// budget) filled from a least-squares model of the measured ones.

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Spread of repeats: (max - min) / median. */
export function spread(xs: readonly number[]): number {
  const m = median(xs);
  return m > 0 ? (Math.max(...xs) - Math.min(...xs)) / m : 0;
}

/**
 * The prefill cost terms of SGLang's `torch_native` attention backend on CPU: the projections and
 * MLP run once per new token (batch x extend), while attention pads each request's query to its
 * whole sequence (`per_req_query_redudant` in torch_native_backend.py), so each request pays
 * attention over (prefix + extend)^2 whatever its cached prefix; plus a cost per request and a
 * fixed cost per batch.
 */
export function prefillTerms(batch: number, extend: number, prefix: number): number[] {
  const seq = prefix + extend;
  return [1, batch, batch * extend, batch * seq * seq];
}

/** Non-negative least squares over a few terms (projected coordinate descent; exact enough for 4). */
export function fitNonNegative(rows: number[][], ys: number[]): number[] {
  const k = rows[0].length;
  // Scale each column to unit norm so one step size suits all of them.
  const norms = Array.from({ length: k }, (_, j) =>
    Math.sqrt(rows.reduce((s, r) => s + r[j] * r[j], 0) || 1),
  );
  const x = rows.map((r) => r.map((v, j) => v / norms[j]));
  const c = new Array(k).fill(0);
  for (let it = 0; it < 20_000; it++) {
    let moved = 0;
    for (let j = 0; j < k; j++) {
      let num = 0;
      let den = 0;
      x.forEach((r, i) => {
        const pred = r.reduce((s, v, m) => s + v * c[m], 0);
        num += r[j] * (ys[i] - pred + r[j] * c[j]);
        den += r[j] * r[j];
      });
      const next = Math.max(0, num / den);
      moved = Math.max(moved, Math.abs(next - c[j]));
      c[j] = next;
    }
    if (moved < 1e-12) break;
  }
  return c.map((v, j) => v / norms[j]);
}

export interface Cell3 {
  batch: number;
  extend: number;
  prefix: number;
}

/** Whether SGLang can prefill this shape as one batch: its new tokens fit the chunk budget. */
export const feasible = (c: Cell3, chunk: number) => c.batch * c.extend <= chunk;

/**
 * The prefill table: measured medians where that shape was measured (every shape a batch can
 * take), the model's value elsewhere. Relative residuals of the model on the measured cells say
 * how well it holds.
 */
export function prefillTable(
  axes: { batch: number[]; extend: number[]; prefix: number[] },
  measured: Map<string, number>,
): { totalMs: number[][][]; coef: number[]; filled: Cell3[]; residuals: number[] } {
  const key = (c: Cell3) => `${c.batch}/${c.extend}/${c.prefix}`;
  const cells = axes.batch.flatMap((batch) =>
    axes.extend.flatMap((extend) => axes.prefix.map((prefix) => ({ batch, extend, prefix }))),
  );
  const known = cells.filter((c) => measured.has(key(c)));
  // Fitted on relative error: every cell counts alike, the fastest as much as the slowest.
  const ys = known.map((c) => measured.get(key(c)) as number);
  const rows = known.map((c, i) => prefillTerms(c.batch, c.extend, c.prefix).map((v) => v / ys[i]));
  const coef = fitNonNegative(
    rows,
    ys.map(() => 1),
  );
  const model = (c: Cell3) =>
    prefillTerms(c.batch, c.extend, c.prefix).reduce((s, v, j) => s + v * coef[j], 0);
  const residuals = known.map((c, i) => model(c) / ys[i] - 1);
  const filled = cells.filter((c) => !measured.has(key(c)));
  const at = (c: Cell3) => measured.get(key(c)) ?? model(c);
  const totalMs = axes.batch.map((batch) =>
    axes.extend.map((extend) =>
      axes.prefix.map((prefix) => +at({ batch, extend, prefix }).toFixed(3)),
    ),
  );
  return { totalMs, coef, filled, residuals };
}
