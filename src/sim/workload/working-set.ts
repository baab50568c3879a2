// The working set of a workload in tokens: what the engine sizes its workers' KV pools against
// (a KV oversubscription of 2x is a working set twice the fleet's capacity).
import type { SimProgram, SimRequestSpec, SimWorkload } from "../types.js";

export interface WorkingSet {
  /** Every program at its largest sequence (prompt and output) at once, shared prefixes once. */
  all_tokens: number;
  /**
   * The most tokens live at one moment when requests take no time: each program holds its latest
   * sequence from its first request to its last, shared prefixes once while any live program uses them.
   */
  peak_live_tokens: number;
}

/** A shared segment at its place: the seeds and lengths up to and including it name it. */
interface LeadNode {
  key: string;
  len: number;
}

interface Step {
  t: number;
  /** Tokens of the sequence beyond its shared lead. */
  own: number;
  /** The leading segments the sequence shares with other programs, outermost first. */
  lead: LeadNode[];
}

/** Seeds used by more than one program: their segments are shared content (prefixes). */
function sharedSeeds(programs: readonly SimProgram[]): Set<number> {
  const owner = new Map<number, number>();
  const shared = new Set<number>();
  programs.forEach((p, i) => {
    for (const r of p.requests)
      for (const s of r.prompt) {
        const o = owner.get(s.seed);
        if (o === undefined) owner.set(s.seed, i);
        else if (o !== i) shared.add(s.seed);
      }
  });
  return shared;
}

function stepOf(r: SimRequestSpec, t: number, shared: Set<number>): Step {
  const lead: LeadNode[] = [];
  let key = "";
  let leadLen = 0;
  for (const s of r.prompt) {
    if (!shared.has(s.seed)) break;
    key += `${s.seed}:${s.len},`;
    lead.push({ key, len: s.len });
    leadLen += s.len;
  }
  let total = 0;
  for (const s of r.prompt) total += s.len;
  for (const s of r.output) total += s.len;
  return { t, own: total - leadLen, lead };
}

function programSteps(p: SimProgram, shared: Set<number>): Step[] {
  let t = p.startS;
  return p.requests.map((r) => stepOf(r, (t += r.gapS), shared));
}

export function workingSet(w: SimWorkload): WorkingSet {
  const shared = sharedSeeds(w.programs);
  const steps = w.programs.map((p) => programSteps(p, shared));
  const leads = new Map<string, number>();
  let all = 0;
  for (const ps of steps) for (const s of ps) for (const n of s.lead) leads.set(n.key, n.len);
  for (const len of leads.values()) all += len;
  for (const ps of steps) all += ps.reduce((m, s) => Math.max(m, s.own), 0);
  return { all_tokens: all, peak_live_tokens: peakLive(steps) };
}

function peakLive(steps: Step[][]): number {
  // Events: a program's step at its time, then its removal after its last step.
  const events: { t: number; end: boolean; p: number; s: Step }[] = [];
  steps.forEach((ps, p) => {
    for (const s of ps) events.push({ t: s.t, end: false, p, s });
    if (ps.length) events.push({ t: ps[ps.length - 1].t, end: true, p, s: ps[ps.length - 1] });
  });
  events.sort((a, b) => a.t - b.t || Number(a.end) - Number(b.end));
  const current = new Map<number, Step>();
  const leadRefs = new Map<string, number>();
  let live = 0;
  let peak = 0;
  // A shared segment counts while any live program's sequence holds it.
  const take = (s: Step, sign: 1 | -1) => {
    live += sign * s.own;
    for (const node of s.lead) {
      const n = (leadRefs.get(node.key) ?? 0) + sign;
      if (n === 0 || (n === 1 && sign === 1)) live += sign * node.len;
      if (n === 0) leadRefs.delete(node.key);
      else leadRefs.set(node.key, n);
    }
  };
  for (const e of events) {
    const prev = current.get(e.p);
    if (prev) take(prev, -1);
    if (e.end) current.delete(e.p);
    else {
      current.set(e.p, e.s);
      take(e.s, 1);
    }
    peak = Math.max(peak, live);
  }
  return peak;
}
