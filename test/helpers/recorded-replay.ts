// The check that a workload converted from a recorded run replays it exactly: each session one
// program, its requests in the order they were sent, each prompt and output materializing to the
// very ids the real worker saw and generated, after the wait the run planned.
import { expect } from "vitest";
import type { SimWorkload } from "../../src/sim/types.js";
import type { RecordedRequest } from "../../src/sim/workload/recorded.js";
import { materialize } from "../../src/sim/workload/tokens.js";

export function expectReplays(w: SimWorkload, records: readonly RecordedRequest[]): void {
  const bySession = new Map<string, RecordedRequest[]>();
  for (const r of [...records].sort((a, b) => a.sentMs - b.sentMs))
    bySession.set(r.session, [...(bySession.get(r.session) ?? []), r]);
  expect(w.programs.map((p) => p.id).sort()).toEqual([...bySession.keys()].sort());
  for (const p of w.programs) {
    const rs = bySession.get(p.id) ?? [];
    expect(p.requests.length, p.id).toBe(rs.length);
    expect(p.startS, p.id).toBeCloseTo(rs[0].gapMs / 1000, 9);
    p.requests.forEach((q, k) => {
      const r = rs[k];
      expect([...materialize(q.prompt, w.vocab)], `${p.id}#${k} prompt`).toEqual(r.promptIds);
      expect([...materialize(q.output, w.vocab)], `${p.id}#${k} output`).toEqual(r.outputIds);
      expect([q.gapKind, q.gapS], `${p.id}#${k} wait`).toEqual([
        r.gapKind,
        k === 0 ? 0 : r.gapMs / 1000,
      ]);
      expect(q.tool, `${p.id}#${k} tool`).toBe(r.tool);
      expect(q.rewrite === true, `${p.id}#${k} rewrite`).toBe(r.rewrite);
    });
  }
}
