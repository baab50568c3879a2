// Replays planned sessions against one target (a gateway, a router, or the workers in turn) the
// way an agent harness does: each step a streamed chat request, tool calls and reasoning produced
// by the real server under a constraint (the ground-truth call as a regex the worker's tool parser
// reads back; `<think>…</think>answer` for the final reply), tool results from BFCL's backends fed
// back after the tool's duration, reasoning left out of the history (as templates of separated-
// thinking models do). Per request: prompt and cached tokens, host-tier hits, time to first token.
import type { PlannedSession, PlannedTurn } from "./workload.js";
import { promptJson } from "./prompt-json.js";

export interface Target {
  name: string;
  /** Where request `seq` of the run goes. */
  url(seq: number): string;
  /** Send x-session-id (gateways); a peer router routes on the prompt alone. */
  sessionHeader: boolean;
  /** The session header's name when it is not x-session-id (Dynamo's ThunderAgent reads x-dynamo-session-id). */
  sessionHeaderName?: string;
  /** Puts a request body in the target's dialect (Dynamo's frontend takes SGLang's `regex` as `guided_regex`). */
  dialect?: (body: Record<string, unknown>) => Record<string, unknown>;
  /** Put the session id in every request body (`session_id`: SGLang's session radix cache keys on it). */
  sessionBody?: boolean;
  /** Called when a session has sent its last request (closes it on the workers). */
  closeSession?: (id: string) => Promise<void>;
}

export interface RequestRecord {
  session: string;
  kind: "tool" | "answer";
  /** First request of a user turn after a human idle gap. */
  returning: boolean;
  promptTokens: number;
  cachedTokens: number;
  /** Tokens the answer generated (usage.completion_tokens; 0 when not reported). */
  completionTokens: number;
  hostTokens: number;
  storageTokens: number;
  ttftMs: number;
  /** When the request was sent and its answer ended (ms since the run began). */
  sentMs: number;
  doneMs: number;
  /** What the prompt renders from (for tokenizing it afterwards: the ideal-cache figure). */
  prompt: { messages: unknown[]; tools: unknown[] };
  /** The token ids the worker generated (SGLang's sglext output_ids; absent when the front does not return them). */
  outputIds?: number[];
  /** The prompt's token ids, as a worker of the run tokenizes it (filled in with the ideal floor). */
  promptIds?: number[];
  /** The reasoning the worker's parser separated from the answer (reasoning_content). */
  reasoningText?: string;
  /** Its length in tokens, as the gateway measures it (filled in with the ideal floor). */
  reasoningTokens?: number;
  /** The prompt-cache marker as the gateway locates it in promptIds (filled in with the ideal floor). */
  cacheMarker?: { tokens: number; ttlS: number };
  /** What the session waited for before sending this request: its start, a tool, or a human. */
  gapKind: "start" | "tool" | "human";
  /** The planned wait (ms, scaled): the session's start offset, the tool's run, or the human gap. */
  gapMs: number;
  /** The tool whose result this request carries (gapKind "tool"). */
  tool?: string;
  /** The history was compacted (rewritten to a summary) before this request. */
  rewrite: boolean;
  /** Tokens an ideal cache (every earlier prompt and answer kept) would serve: filled in after the run. */
  idealCachedTokens?: number;
  worker: string | null;
  ok: boolean;
  error?: string;
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}
interface CachedDetails {
  device?: number;
  host?: number;
  storage?: number;
}

interface StreamResult {
  ttftMs: number;
  usage: Usage | null;
  /** SGLang's cached_tokens_details (device / host / storage) when it sends them. */
  details: CachedDetails | null;
  text: string;
  toolCallIds: string[];
  /** The reasoning the worker's parser separated (reasoning_content deltas). */
  reasoning: string;
  /** The generated token ids, when the worker sent them (sglext.output_ids). */
  outputIds: number[] | null;
  status: number;
  /** The worker a kvctl gateway chose (its x-kvctl-worker header), or null. */
  worker: string | null;
  /** An error event inside the stream. */
  error: string | null;
}

async function streamChat(
  url: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<StreamResult> {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const worker = r.headers.get("x-kvctl-worker");
  if (r.status !== 200 || !r.body)
    return {
      ttftMs: performance.now() - t0,
      usage: null,
      details: null,
      text: await r.text(),
      reasoning: "",
      toolCallIds: [],
      outputIds: null,
      status: r.status,
      worker,
      error: null,
    };
  const acc: StreamResult = {
    ttftMs: -1,
    usage: null,
    details: null,
    text: "",
    reasoning: "",
    toolCallIds: [],
    outputIds: null,
    status: 200,
    worker,
    error: null,
  };
  let tail = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    tail += dec.decode(chunk, { stream: true });
    let k: number;
    while ((k = tail.indexOf("\n\n")) >= 0) {
      const ev = tail.slice(0, k).trim();
      tail = tail.slice(k + 2);
      if (!ev.startsWith("data:")) continue;
      const data = ev.slice(5).trim();
      if (data !== "[DONE]") readEvent(acc, JSON.parse(data), t0);
    }
  }
  if (acc.ttftMs < 0) acc.ttftMs = performance.now() - t0;
  return acc;
}

/** One stream event into the result so far (ttftMs stays -1 until the answer's first event). */
// biome-ignore lint/suspicious/noExplicitAny: a parsed SSE event of the OpenAI stream
function readEvent(acc: StreamResult, j: any, t0: number): void {
  // SGLang reports a refused request (say, a prompt longer than the pool) as an error event
  // inside a 200 stream, followed by a usage of 1 prompt token.
  if (j.error)
    acc.error = typeof j.error.message === "string" ? j.error.message : JSON.stringify(j.error);
  if (j.usage) acc.usage = j.usage;
  if (j.sglext?.cached_tokens_details) acc.details = j.sglext.cached_tokens_details;
  if (j.choices?.[0]?.sglext?.cached_tokens_details)
    acc.details = j.choices[0].sglext.cached_tokens_details;
  if (Array.isArray(j.sglext?.output_ids?.[0])) acc.outputIds = j.sglext.output_ids[0];
  if (j.usage && process.env.KVCTL_BENCH_DEBUG)
    process.stderr.write(`usage ${JSON.stringify(j.usage)} ${JSON.stringify(acc.details)}\n`);
  const d = j.choices?.[0]?.delta;
  if (!d) return;
  // The first event of the answer (the worker sends it with the first token; a tool call's
  // parsed deltas come later, once the parser has read the call).
  if (acc.ttftMs < 0) acc.ttftMs = performance.now() - t0;
  if (typeof d.content === "string") acc.text += d.content;
  if (typeof d.reasoning_content === "string") acc.reasoning += d.reasoning_content;
  for (const c of d.tool_calls ?? []) if (c.id) acc.toolCallIds.push(c.id);
}

export interface DriveOptions {
  system: string;
  model: string;
  maxTokens: number;
}

/** Sends one request and fills in the record's answer fields; the result when it streamed. */
async function attemptOnce(
  url: string,
  body: Record<string, unknown>,
  headers: Record<string, string>,
  rec: RequestRecord,
  t0: number,
): Promise<StreamResult | null> {
  try {
    const res = await streamChat(url, body, headers);
    rec.doneMs = performance.now() - t0;
    rec.worker = res.worker;
    rec.ttftMs = res.ttftMs;
    rec.ok = res.status === 200 && res.usage !== null && res.error === null;
    rec.error = rec.ok ? undefined : (res.error ?? `HTTP ${res.status}: ${res.text.slice(0, 200)}`);
    const u: Usage = res.usage ?? {};
    rec.promptTokens = u.prompt_tokens ?? 0;
    rec.cachedTokens = u.prompt_tokens_details?.cached_tokens ?? 0;
    rec.completionTokens = u.completion_tokens ?? 0;
    rec.hostTokens = res.details?.host ?? 0;
    rec.storageTokens = res.details?.storage ?? 0;
    if (res.outputIds) rec.outputIds = res.outputIds;
    if (res.reasoning !== "") rec.reasoningText = res.reasoning;
    return res;
  } catch (e) {
    rec.doneMs = performance.now() - t0;
    rec.ok = false;
    rec.error = (e as Error).message;
    return null;
  }
}

/** Each session's time from its first request sent to its last answer done (s). */
export function sessionCompletion(records: readonly RequestRecord[]): number[] {
  const span = new Map<string, [number, number]>();
  for (const r of records) {
    const [a, b] = span.get(r.session) ?? [Number.POSITIVE_INFINITY, 0];
    span.set(r.session, [Math.min(a, r.sentMs), Math.max(b, r.doneMs)]);
  }
  return [...span.values()].map(([a, b]) => (b - a) / 1000);
}

/** What every session of one drive shares: the target, the options, the clock and the records. */
interface DriveRun {
  target: Target;
  o: DriveOptions;
  t0: number;
  records: RequestRecord[];
  seq: number;
  system: Record<string, unknown>;
}

type Wait = Pick<RequestRecord, "gapKind" | "gapMs" | "tool" | "rewrite">;

/**
 * A session's conversation so far: its messages, the user requests a summary names, and what the
 * next request waited for (a replay of the trace needs it beside the send time).
 */
interface Conversation {
  history: Record<string, unknown>[];
  asked: string[];
  wait: Wait;
}

export async function drive(
  target: Target,
  sessions: PlannedSession[],
  o: DriveOptions,
): Promise<RequestRecord[]> {
  const run: DriveRun = {
    target,
    o,
    t0: performance.now(),
    records: [],
    seq: 0,
    system: {
      role: "system",
      content: [{ type: "text", text: o.system, cache_control: { type: "ephemeral", ttl: "1h" } }],
    },
  };
  await Promise.all(sessions.map((s) => runSession(run, s)));
  return run.records;
}

async function runSession(run: DriveRun, s: PlannedSession): Promise<void> {
  await sleep(Math.max(0, s.startMs - (performance.now() - run.t0)));
  const c: Conversation = {
    history: [],
    asked: [],
    wait: { gapKind: "start", gapMs: s.startMs, rewrite: false },
  };
  for (const [k, turn] of s.turns.entries()) {
    if (k > 0) c.wait = { gapKind: "human", gapMs: turn.idleMs, rewrite: turn.compact };
    await runTurn(run, s, turn, c);
  }
  await run.target.closeSession?.(s.id);
}

/** One user turn: its tool calls, each answered after the tool's time, then the final answer. */
async function runTurn(
  run: DriveRun,
  s: PlannedSession,
  turn: PlannedTurn,
  c: Conversation,
): Promise<void> {
  if (turn.idleMs) await sleep(turn.idleMs);
  // Compaction: the history becomes a summary of the earlier requests (workload.ts plans when).
  const summary = () => [
    { role: "user", content: `Earlier requests, summarised: ${c.asked.join(" ")}` },
    { role: "assistant", content: "Noted." },
  ];
  if (turn.compact) c.history = summary();
  c.history.push({ role: "user", content: turn.user });
  let first = true;
  const send = (kind: RequestRecord["kind"], regex: string) => {
    const returning = first && turn.idleMs > 0;
    first = false;
    return sendRequest(run, s, c, kind, regex, returning);
  };
  for (const [i, call] of turn.calls.entries()) {
    // Inside a tool loop the summary keeps the request being worked on after it.
    if (call.compactBefore) {
      c.history = [...summary(), { role: "user", content: turn.user }];
      c.wait = { ...c.wait, rewrite: true };
    }
    const fn = { name: call.name, arguments: call.arguments };
    const think = call.reasoningChars > 0 ? `<think>[a-z ]{${call.reasoningChars}}</think>` : "";
    const res = await send(
      "tool",
      `${think}<tool_call>${escapeRegex(JSON.stringify(fn))}</tool_call>`,
    );
    const id = res?.toolCallIds[0] ?? `call_${s.id}_${c.history.length}_${i}`;
    c.history.push({
      role: "assistant",
      content: "",
      tool_calls: [
        {
          id,
          type: "function",
          function: { name: call.name, arguments: promptJson(call.arguments) },
        },
      ],
    });
    await sleep(call.toolMs);
    c.wait = { gapKind: "tool", gapMs: call.toolMs, tool: call.name, rewrite: false };
    c.history.push({ role: "tool", tool_call_id: id, content: call.result });
  }
  const res = await send(
    "answer",
    `<think>[a-z ]{${turn.reasoningChars}}</think>[a-z ]{${turn.answerChars}}`,
  );
  // The reasoning is not sent back: the answer alone joins the history.
  const answer = res ? res.text.replace(/^[\s\S]*<\/think>/, "") : "";
  c.history.push({ role: "assistant", content: answer });
  c.asked.push(turn.user);
}

/** One request of a session over its history so far; its record kept, its result when it was served. */
async function sendRequest(
  run: DriveRun,
  s: PlannedSession,
  c: Conversation,
  kind: RequestRecord["kind"],
  regex: string,
  returning: boolean,
): Promise<StreamResult | null> {
  const { target, o, t0 } = run;
  const body = {
    model: o.model,
    messages: [run.system, ...c.history],
    tools: s.tools,
    max_tokens: o.maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    return_cached_tokens_details: true,
    regex,
    // In thinking mode SGLang applies a regex only after the reasoning ends, and the model would
    // write an unconstrained reasoning span until max_tokens; the regex here spells the
    // reasoning itself (<think>…</think>), so it must bind from the first token. The reasoning
    // parser still separates the span (reasoning_content).
    chat_template_kwargs: { enable_thinking: false },
    // The generated ids let the ideal floor credit exactly what the next prompt replays of this answer.
    return_output_ids_in_sglext: true,
    ...(target.sessionBody ? { session_id: s.id } : {}),
  };
  const headers: Record<string, string> = target.sessionHeader
    ? { [target.sessionHeaderName ?? "x-session-id"]: s.id }
    : {};
  const rec: RequestRecord = {
    session: s.id,
    kind,
    returning,
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
    hostTokens: 0,
    storageTokens: 0,
    ttftMs: 0,
    sentMs: performance.now() - t0,
    doneMs: 0,
    prompt: { messages: body.messages, tools: s.tools },
    ...c.wait,
    worker: null,
    ok: false,
  };
  const res = await attemptOnce(
    target.url(run.seq++),
    target.dialect ? target.dialect(body) : body,
    headers,
    rec,
    t0,
  );
  run.records.push(rec);
  return rec.ok ? res : null;
}
