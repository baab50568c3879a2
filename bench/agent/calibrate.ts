// The gpu_shaped regime's calibration: this machine's prefill rate with the bench's own model, and
// the returning turns' prompt sizes, so the time scale can make the median tool gap outlast the
// median returning-turn prefill by a chosen factor (as a GPU prefill is short beside a tool call).
import type { PlannedSession } from "./workload.js";

interface ChatMessage {
  role: string;
  content: unknown;
  tool_calls?: unknown[];
  tool_call_id?: string;
}

async function tokenize(
  url: string,
  model: string,
  messages: ChatMessage[],
  tools: unknown[],
): Promise<number> {
  const r = await fetch(`${url}/v1/tokenize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages, tools }),
  });
  if (r.status !== 200)
    throw new Error(
      `calibration: /v1/tokenize answered ${r.status}: ${(await r.text()).slice(0, 200)}`,
    );
  return ((await r.json()) as { tokens: number[] }).tokens.length;
}

/** The prompt a session's first returning turn sends: its first turn's tool exchanges and answer
 * (answer text of the planned length), then the second user message. */
function returningPrompt(system: string, s: PlannedSession): ChatMessage[] {
  const m: ChatMessage[] = [
    { role: "system", content: system },
    { role: "user", content: s.turns[0].user },
  ];
  for (const [i, c] of s.turns[0].calls.entries()) {
    m.push({
      role: "assistant",
      content: "",
      tool_calls: [
        {
          id: `c${i}`,
          type: "function",
          function: { name: c.name, arguments: JSON.stringify(c.arguments) },
        },
      ],
    });
    m.push({ role: "tool", tool_call_id: `c${i}`, content: c.result });
  }
  m.push(
    { role: "assistant", content: "a".repeat(s.turns[0].answerChars) },
    { role: "user", content: s.turns[1].user },
  );
  return m;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[(xs.length - 1) >> 1];

/** Median prompt tokens of the sessions' first returning turns (tokenized by a worker). */
export async function returningPromptTokens(
  url: string,
  model: string,
  system: string,
  sessions: PlannedSession[],
): Promise<number> {
  const sizes: number[] = [];
  for (const s of sessions)
    if (s.turns.length > 1)
      sizes.push(await tokenize(url, model, returningPrompt(system, s), s.tools));
  if (sizes.length === 0) throw new Error("calibration: no session has a returning turn");
  return median(sizes);
}

/** Prefill tokens per second: prompts of `tokens` size, each new to the cache (a nonce first),
 * one token out; the median of three. */
export async function prefillRate(
  url: string,
  model: string,
  system: string,
  tokens: number,
): Promise<number> {
  const rates: number[] = [];
  const filler = "the tool returned these rows of data for the agent to read ".repeat(
    Math.ceil(tokens / 10),
  );
  for (let i = 0; i < 3; i++) {
    const messages = [
      { role: "system", content: `${Date.now()}-${i} ${system}` },
      { role: "user", content: filler },
    ];
    const t0 = performance.now();
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, messages, max_tokens: 1, temperature: 0 }),
    });
    const j = (await r.json()) as {
      usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null };
    };
    const s = (performance.now() - t0) / 1000;
    if (r.status !== 200 || !j.usage?.prompt_tokens)
      throw new Error(
        `calibration: prefill request answered ${r.status}: ${JSON.stringify(j).slice(0, 200)}`,
      );
    rates.push((j.usage.prompt_tokens - (j.usage.prompt_tokens_details?.cached_tokens ?? 0)) / s);
  }
  return median(rates);
}

/** Median planned tool duration (ms) of the sessions. */
export function medianToolMs(sessions: PlannedSession[]): number {
  const xs = sessions.flatMap((s) => s.turns.flatMap((t) => t.calls.map((c) => c.toolMs)));
  return xs.length ? median(xs) : 0;
}

/** How long the trace takes with no compute (ms, at the sessions' time scale): the latest
 * session's start plus its human and tool gaps. */
export function plannedSpanMs(sessions: PlannedSession[]): number {
  return Math.max(
    0,
    ...sessions.map(
      (s) =>
        s.startMs +
        s.turns.reduce((a, t) => a + t.idleMs + t.calls.reduce((b, c) => b + c.toolMs, 0), 0),
    ),
  );
}
