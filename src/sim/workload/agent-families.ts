// bench:agent's own families (`bfcl`, `coding`) as sim programs: the sessions its generator plans
// (bench/agent/workload.ts, from BFCL's or mini-swe-agent's data), rendered as the bench's chat
// template renders them, each piece of text one segment whose seed is a hash of its text and whose
// length is a tokenizer-free estimate (characters over `charsPerToken`, plus the role markers of a
// message). Equal text is equal tokens, so the system prompt and a class's tool schemas are shared
// across sessions as in the real bench; the reasoning the template drops is not replayed, the
// answer is. Exact ids come from a recorded run instead (recorded.ts).
import type { Segment, SimProgram, SimRequestSpec, SimWorkload } from "../types.js";
import { hash53 } from "./random.js";

/** The parts of bench:agent's planned sessions this reads (bench/agent/workload.ts). */
export interface PlannedAgentSession {
  id: string;
  startMs: number;
  tools: unknown[];
  turns: {
    user: string;
    idleMs: number;
    compact: boolean;
    calls: {
      name: string;
      arguments: Record<string, unknown>;
      result: string;
      toolMs: number;
      compactBefore: boolean;
      reasoningChars: number;
    }[];
    reasoningChars: number;
    answerChars: number;
  }[];
}

export interface AgentFamilyOptions {
  family: "bfcl" | "coding";
  system: string;
  /** Characters per token of the estimate (default 4: English prose under a Llama-3-class tokenizer). */
  charsPerToken?: number;
  vocab?: number;
  /** The plan's own time scale (its durations are divided by it); 1 replays them as planned. */
  timeScale?: number;
  seed?: number;
}

/** Tokens of a chat message's role markers (`<|start|>role\n ... <|end|>`). */
export const MESSAGE_OVERHEAD_TOKENS = 4;
export const DEFAULT_CHARS_PER_TOKEN = 4;
/** The bench marks its system prompt with an Anthropic-style 1 h cache breakpoint. */
const SYSTEM_MARKER_TTL_S = 3600;

/** Renders one session's requests; `text(kind, s)` is the segment of a piece of text. */
class SessionRenderer {
  readonly requests: SimRequestSpec[] = [];
  private history: Segment[] = [];
  private readonly prefix: Segment[];
  private readonly markerTokens: number;

  constructor(
    private readonly s: PlannedAgentSession,
    system: string,
    private readonly est: (text: string) => number,
    private readonly scale: number,
  ) {
    this.prefix = [this.text("system", system), this.text("tools", JSON.stringify(s.tools))];
    this.markerTokens = this.prefix.reduce((n, x) => n + x.len, 0);
  }

  /** Equal text, equal tokens: the seed is the text's hash (namespaced by what the text is). */
  text(kind: string, text: string): Segment {
    return { seed: hash53(`${kind}\u0000${text}`), len: this.est(text) + MESSAGE_OVERHEAD_TOKENS };
  }

  /** Generated text: unique to its place in this session. */
  generated(kind: string, where: string, chars: number): Segment {
    return {
      seed: hash53(`${kind}\u0000${this.s.id}\u0000${where}`),
      len: this.est("x".repeat(chars)),
    };
  }

  summary(asked: string[], current: string | null): void {
    this.history = [
      this.text("user", `Earlier requests, summarised: ${asked.join(" ")}`),
      this.text("assistant", "Noted."),
      ...(current !== null ? [this.text("user", current)] : []),
    ];
  }

  push(seg: Segment): void {
    this.history.push(seg);
  }

  send(output: Segment[], reasoning: number, wait: Wait, rewrite: boolean): void {
    this.requests.push({
      prompt: [...this.prefix, ...this.history],
      output,
      reasoningTokens: reasoning,
      gapS: (wait.gapMs * this.scale) / 1000,
      gapKind: wait.kind,
      ...(wait.tool !== undefined ? { tool: wait.tool } : {}),
      cacheMarker: { tokens: this.markerTokens, ttlS: SYSTEM_MARKER_TTL_S },
      ...(rewrite ? { rewrite: true } : {}),
    });
  }
}

interface Wait {
  gapMs: number;
  kind: SimRequestSpec["gapKind"];
  tool?: string;
}

/** One planned session as bench:agent's driver sends it (bench/agent/driver.ts), request by request. */
function renderSession(r: SessionRenderer, s: PlannedAgentSession): SimRequestSpec[] {
  const asked: string[] = [];
  s.turns.forEach((turn, k) => {
    let wait: Wait = { gapMs: k === 0 ? 0 : turn.idleMs, kind: k === 0 ? "start" : "human" };
    let rewrite = turn.compact;
    if (turn.compact) r.summary(asked, null);
    r.push(r.text("user", turn.user));
    turn.calls.forEach((call, i) => {
      // Inside a tool loop the summary keeps the request being worked on after it.
      if (call.compactBefore) r.summary(asked, turn.user);
      rewrite ||= call.compactBefore;
      const call_ = JSON.stringify({ name: call.name, arguments: call.arguments });
      const answer = r.generated("call", `${k}.${i}`, `<tool_call>${call_}</tool_call>`.length);
      const think =
        call.reasoningChars > 0 ? [r.generated("think", `${k}.${i}`, call.reasoningChars)] : [];
      r.send([...think, answer], think[0]?.len ?? 0, wait, rewrite);
      r.push(answer);
      r.push(r.text("tool", call.result));
      wait = { gapMs: call.toolMs, kind: "tool", tool: call.name };
      rewrite = false;
    });
    const think = r.generated("think", `${k}`, turn.reasoningChars);
    const answer = r.generated("answer", `${k}`, turn.answerChars);
    r.send([think, answer], think.len, wait, rewrite);
    // The template drops the reasoning: the answer alone joins the history.
    r.push(answer);
    asked.push(turn.user);
  });
  return r.requests;
}

/**
 * bench:agent's sessions (planned by its own generator from its own data) as a workload: one
 * program per session, a request per step as its driver sends them, sizes estimated from text.
 */
export function agentFamilyWorkload(
  sessions: readonly PlannedAgentSession[],
  o: AgentFamilyOptions,
): SimWorkload {
  const cpt = o.charsPerToken ?? DEFAULT_CHARS_PER_TOKEN;
  if (!(cpt > 0)) throw new RangeError(`charsPerToken: expected a number > 0, got ${cpt}`);
  const scale = o.timeScale ?? 1;
  if (!(scale > 0)) throw new RangeError(`timeScale: expected a number > 0, got ${scale}`);
  const est = (text: string) => Math.max(1, Math.round(text.length / cpt));
  const programs: SimProgram[] = sessions.map((s) => ({
    id: s.id,
    tenant: "default",
    family: o.family,
    startS: (s.startMs * scale) / 1000,
    requests: renderSession(new SessionRenderer(s, o.system, est, scale), s),
  }));
  programs.sort((a, b) => a.startS - b.startS || (a.id < b.id ? -1 : 1));
  return {
    name: `bench-agent-${o.family}`,
    vocab: o.vocab ?? 128256,
    programs,
    meta: {
      family: o.family,
      sessions: sessions.length,
      ...(o.seed !== undefined ? { seed: o.seed } : {}),
      tokens: "estimate",
      chars_per_token: cpt,
    },
  };
}
