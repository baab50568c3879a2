// Generated agent programs (family `generated`) and floods of unrelated requests (family `flood`),
// their shape from published agent traces (shape.ts; docs/sim.md cites each figure). A program is
// one session of one tenant's agent: a shared prefix (the tenant's tool schemas, the agent's system
// prompt), user turns after human gaps, each turn a loop of tool calls after tool gaps, reasoning
// that the next prompt drops, and compaction of the history when the context nears its limit.
import type { GapKind, Segment, SimProgram, SimRequestSpec, SimWorkload } from "../types.js";
import { checkGenerateOptions, type GenerateOptions, resolveOptions } from "./options.js";
import { Rng } from "./random.js";
import { SeedKind, seedSalt, structuredSeed } from "./seeds.js";
import { AGENT_SHAPE as A, FLOOD_SHAPE as F, REFERENCE_CONTEXT, TOOL_NAMES } from "./shape.js";

export type { GapScale, GenerateOptions } from "./options.js";

type Resolved = ReturnType<typeof resolveOptions>;

/** What the programs of one tenant share: its tool schemas, its agents' system prompts, its tools. */
interface Tenant {
  id: string;
  tools: Segment;
  systems: Segment[];
  /** Each tool's median duration (s), by index into TOOL_NAMES. */
  toolMedianS: number[];
}

/** `x` rounded into [lo, hi] (hi rounded down: a bound is never passed). */
const clampInt = (x: number, lo: number, hi: number) =>
  Math.max(lo, Math.min(Math.floor(hi), Math.round(x)));

function makeTenants(o: Resolved, salt: number): Tenant[] {
  const s = o.context / REFERENCE_CONTEXT;
  // A prefix may take at most a quarter of the context, split as the reference sizes are.
  const cap = (share: number) =>
    (A.maxPrefixShare * o.context * share) / (A.toolSchemaTokens + A.systemPromptTokens);
  return Array.from({ length: o.tenants }, (_, t) => {
    const r = new Rng(o.seed, "tenant", t);
    const size = (ref: number) => clampInt(r.lognormal(ref * s, A.prefixSigma), 1, cap(ref));
    const tools = {
      seed: structuredSeed(salt, SeedKind.tools, t, 0),
      len: size(A.toolSchemaTokens),
    };
    const systems = Array.from({ length: o.agentsPerTenant }, (_, k) => ({
      seed: structuredSeed(salt, SeedKind.system, t, k),
      len: size(A.systemPromptTokens),
    }));
    const [lo, hi] = A.toolMedianRangeS;
    const toolMedianS = TOOL_NAMES.slice(0, A.toolsPerTenant).map(() => r.logUniform(lo, hi));
    return { id: `t${t}`, tools, systems, toolMedianS };
  });
}

/** Builds one program's requests: the history as segments, compacted when it nears the limit. */
class ProgramBuilder {
  readonly requests: SimRequestSpec[] = [];
  private counter = 0;
  private history: Segment[] = [];
  private historyLen = 0;
  private user: Segment | null = null;
  private rewrite = false;
  private readonly prefixLen: number;
  private readonly scale: number;

  constructor(
    readonly r: Rng,
    private readonly o: Resolved,
    private readonly salt: number,
    private readonly index: number,
    private readonly prefix: Segment[],
  ) {
    this.prefixLen = prefix.reduce((n, s) => n + s.len, 0);
    this.scale = o.context / REFERENCE_CONTEXT;
  }

  /** A fresh segment of this program (content no other program has). */
  segment(len: number): Segment {
    return { seed: structuredSeed(this.salt, SeedKind.program, this.index, this.counter++), len };
  }

  /** Sizes drawn at this workload's context, within their share of it. */
  draw(median: number, sigma: number, maxShare: number, min = 1): number {
    return clampInt(this.r.lognormal(median * this.scale, sigma), min, maxShare * this.o.context);
  }

  /** Appends to the history, first compacting it if the prompt would pass the limit. */
  append(seg: Segment): void {
    const limit = A.compactAtShare * this.o.context;
    if (this.prefixLen + this.historyLen + seg.len > limit && this.history.length > 1) {
      // The summary keeps the request being worked on after it (an agent harness's auto-compact).
      const summary = this.segment(Math.round(A.summaryShare * this.o.context));
      this.history = this.user && this.user !== seg ? [summary, this.user] : [summary];
      this.historyLen = this.history.reduce((n, s) => n + s.len, 0);
      this.rewrite = true;
    }
    this.history.push(seg);
    this.historyLen += seg.len;
  }

  startTurn(user: Segment): void {
    this.user = user;
    this.append(user);
  }

  /** One request on the current history; its answer (not its reasoning) joins the history. */
  send(gapS: number, gapKind: GapKind, tool?: string): void {
    const total = this.draw(A.outputMedian, A.outputSigma, A.maxOutputShare, 2);
    const reasoning = Math.round(total * A.reasoningShare);
    const answer = this.segment(total - reasoning);
    const output = reasoning > 0 ? [this.segment(reasoning), answer] : [answer];
    this.requests.push({
      prompt: [...this.prefix, ...this.history],
      output,
      reasoningTokens: reasoning,
      gapS,
      gapKind,
      ...(tool !== undefined ? { tool } : {}),
      cacheMarker: { tokens: this.prefixLen, ttlS: A.cacheTtlS },
      ...(this.rewrite ? { rewrite: true } : {}),
    });
    this.rewrite = false;
    this.append(answer);
  }

  /** The tool results' size: the context reaches its limit in about `stepsToLimit` steps. */
  appendMedian(): number {
    const limit = A.compactAtShare * this.o.context;
    const perStep = (limit - this.prefixLen) / A.stepsToLimit;
    const answerMean =
      (1 - A.reasoningShare) * A.outputMedian * this.scale * Math.exp(A.outputSigma ** 2 / 2);
    const appendMean = Math.max(16, perStep - answerMean);
    return appendMean / Math.exp(A.appendSigma ** 2 / 2) / this.scale;
  }
}

function agentProgram(p: number, o: Resolved, salt: number, tenants: Tenant[]): SimProgram {
  const r = new Rng(o.seed, "program", p);
  const tenant = tenants[p % tenants.length];
  const prefix = [tenant.tools, tenant.systems[r.int(tenant.systems.length)]];
  const b = new ProgramBuilder(r, o, salt, p, prefix);
  const human = A.humanGap[o.gaps];
  const turns = Math.min(o.maxTurns, Math.floor(A.turnsPerSession.sample(r)));
  const appendMedian = b.appendMedian();
  for (let k = 0; k < turns; k++) {
    b.startTurn(b.segment(b.draw(A.userMedian, A.userSigma, A.maxUserShare)));
    const gapS = k === 0 ? 0 : r.lognormal(human.medianS, human.sigma);
    b.send(gapS, k === 0 ? "start" : "human");
    const steps = Math.floor(A.stepsPerTurn.sample(r));
    for (let s = 0; s < steps; s++) {
      const t = r.zipf(tenant.toolMedianS.length, A.toolZipf);
      const toolS = r.lognormal(tenant.toolMedianS[t], A.toolSigma);
      b.append(b.segment(b.draw(appendMedian, A.appendSigma, A.maxAppendShare)));
      b.send(toolS, "tool", TOOL_NAMES[t]);
    }
  }
  const startS = r.next() * o.arrivalWindowS;
  return { id: `g${p}`, tenant: tenant.id, family: "generated", startS, requests: b.requests };
}

function floodProgram(k: number, o: Resolved, salt: number, tenants: Tenant[]): SimProgram {
  const r = new Rng(o.seed, "flood", k);
  const size = (median: number, sigma: number, maxShare: number) =>
    clampInt(r.lognormal(median, sigma), 1, maxShare * o.context);
  const seed = (c: number) => structuredSeed(salt, SeedKind.flood, k, c);
  const request: SimRequestSpec = {
    prompt: [{ seed: seed(0), len: size(F.promptMedian, F.promptSigma, 0.5) }],
    output: [{ seed: seed(1), len: size(F.outputMedian, F.outputSigma, A.maxOutputShare) }],
    reasoningTokens: 0,
    gapS: 0,
    gapKind: "start",
  };
  const startS = r.next() * o.arrivalWindowS;
  const tenant = tenants[k % tenants.length].id;
  return { id: `f${k}`, tenant, family: "flood", startS, requests: [request] };
}

/** A generated workload: agent programs of several tenants, and a flood when asked. */
export function generateWorkload(options: GenerateOptions): SimWorkload {
  checkGenerateOptions(options);
  const o = resolveOptions(options);
  const salt = seedSalt(o.seed);
  const tenants = makeTenants(o, salt);
  const programs = Array.from({ length: o.programs }, (_, p) => agentProgram(p, o, salt, tenants));
  for (let k = 0; k < o.floodRequests; k++) programs.push(floodProgram(k, o, salt, tenants));
  programs.sort((a, b) => a.startS - b.startS || (a.id < b.id ? -1 : 1));
  return {
    name: `generated-${o.context}-${o.gaps}${o.floodRequests ? "-flood" : ""}`,
    vocab: o.vocab,
    programs,
    meta: {
      family: "generated",
      seed: o.seed,
      programs: o.programs,
      tenants: o.tenants,
      context: o.context,
      gaps: o.gaps,
      flood: o.floodRequests > 0,
      flood_requests: o.floodRequests,
      agents_per_tenant: o.agentsPerTenant,
      max_turns: o.maxTurns,
      arrival_window_s: o.arrivalWindowS,
      vocab: o.vocab,
    },
  };
}
