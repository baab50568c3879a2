// The typed observations the gateway hands its policy: every request/response pair and every
// change in what the gateway knows about a worker's cache becomes exactly one of these.
import type { TierCounts } from "../index/index.js";
import type { Command } from "../protocol/index.js";

export type RouteKind = "chat" | "completions" | "messages" | "generate";

export interface TokenRange {
  start: number;
  end: number;
}

/** Where a turn's tokens lie in the session's sequence (token offsets, end exclusive). */
export interface TurnRanges {
  /** The system prompt (and tools), when the worker's template puts it first. */
  system: TokenRange | null;
  /** What earlier turns already held (the longest common prefix with the previous sequence). */
  history: TokenRange;
  /** This turn's new prompt tokens. */
  prompt: TokenRange;
  /** The reasoning part of the output, when the worker separated it. */
  reasoning: TokenRange | null;
  /** The output tokens (reasoning included). */
  output: TokenRange | null;
}

export interface ToolCallInfo {
  id: string | null;
  name: string | null;
}

export interface Usage {
  promptTokens: number | null;
  completionTokens: number | null;
  /** usage.prompt_tokens_details.cached_tokens: what the worker's prefix cache served. */
  cachedTokens: number | null;
}

export interface TurnStarted {
  type: "TurnStarted";
  at: number;
  requestId: string;
  sessionId: string | null;
  route: RouteKind;
  stream: boolean;
  worker: string;
  reason: string;
  /** Prompt block hashes (worker scheme) when the prompt was tokenized before routing. */
  promptBlocks: bigint[] | null;
  /** Blocks per tier the chosen worker was known to hold, from the index. */
  overlap: TierCounts | null;
  /** The request's `model` field. */
  model?: string | null;
  /** The last message of the prompt: its role and the tool-call ids its tool results answer. */
  tail?: PromptTail | null;
  /** Pins, leases and the open tool call the session store held when the turn began. */
  stored?: StoredSessionState | null;
  /** The tenant whose key the request carried, who owns its session (null: auth off). */
  tenant?: string | null;
}

export interface PromptTail {
  /** "user", "tool" (OpenAI tool results, Anthropic tool_result blocks), "assistant", "system", or null. */
  role: string | null;
  toolCallIds: string[];
}

export interface StoredSessionState {
  worker: string | null;
  pins: { worker: string; blockHashes: string[]; ttlSeconds: number | null; atMs: number }[];
  leases: {
    worker: string;
    leaseId: string;
    blockHashes: string[];
    ttlSeconds: number | null;
    atMs: number;
  }[];
  tool: { worker: string; epoch: number | null; startedMs: number } | null;
}

/** A prompt-cache breakpoint with its position in the worker's tokens. */
export interface CacheBreakpoint {
  /** Tokens of the prompt up to and including the marked block (the worker's count). */
  tokens: number;
  ttlSeconds: number;
  /** Where the marker was: "tools", "system", "message[3]", "auto", "prompt_cache_retention". */
  at: string;
}

export interface CacheMarkers {
  breakpoints: CacheBreakpoint[];
  /** Why the markers were not usable (too many, TTL order, unknown TTL); empty when fine. */
  errors: string[];
}

export interface TurnFinished {
  type: "TurnFinished";
  at: number;
  requestId: string;
  sessionId: string | null;
  /** The tenant whose key the request carried (null or absent: auth off, or the admin key). */
  tenant?: string | null;
  route: RouteKind;
  worker: string;
  /** Upstream HTTP status; 0 when the worker never answered. */
  status: number;
  /** Why the turn ended without an answer (timeout, worker failure, client gone). */
  error: string | null;
  finishReason: string | null;
  usage: Usage;
  /** Prompt and output token ids, when the worker reported them. */
  promptTokens: number[] | null;
  outputTokens: number[] | null;
  /** The block hashes of the whole sequence (prompt + output full pages), in the worker's scheme. */
  chain: bigint[];
  ranges: TurnRanges | null;
  toolCalls: ToolCallInfo[];
  durationMs: number;
  /** Prompt-cache markers of the request (Anthropic cache_control, OpenAI prompt_cache_retention). */
  cacheMarkers?: CacheMarkers | null;
  model?: string | null;
  /** Blocks the index holds on the worker's GPU tier as the turn ends (from its KV events: every
   * session's and sessionless request's, whichever replica served them); null when the gateway
   * reads no events from that worker. */
  workerDeviceBlocks?: number | null;
}

export interface SessionIdle {
  type: "SessionIdle";
  at: number;
  sessionId: string;
  worker: string | null;
  idleMs: number;
  chain: bigint[];
}

export interface WorkerJoined {
  type: "WorkerJoined";
  at: number;
  worker: string;
  pageSize: number;
}

export interface WorkerCleared {
  type: "WorkerCleared";
  at: number;
  worker: string;
  /** drained: failed health; restart: its event stream restarted; gap: events lost with no replay. */
  reason: "drained" | "restart" | "gap";
}

export interface WorkerStale {
  type: "WorkerStale";
  at: number;
  worker: string;
  /** Batches missing from its event stream. */
  missing: number;
}

export interface CommandAcked {
  type: "CommandAcked";
  at: number;
  sessionId: string | null;
  worker: string;
  commandType: string;
  /** An ack status, or "failed" (no ack) / "dropped" (never sent). */
  status: string;
  /** The id of the command (PolicyCommand.id), by which the policy finds the rule that sent it. */
  commandId: string | null;
  /** The command as it was sent: the policy's, or fewer blocks when the gateway trimmed or narrowed it. */
  command?: Command;
  affected?: number;
  /** Blocks the worker did not find (a Cache ack lists them). */
  missing?: bigint[];
  /** Blocks the worker refused (a pin past its budget). */
  skipped?: number;
  epoch?: number | null;
  detail?: string | null;
}

/** An explicit hint from the harness (the events route or the x-kvctl-hint header). */
export interface SessionHint {
  type: "SessionHint";
  at: number;
  sessionId: string;
  event: "tool_start" | "tool_end" | "idle" | "close" | "rewrite";
  toolName: string | null;
  toolCallId: string | null;
  /** rewrite: tokens of the prompt that stay (the divergence point), when the harness knows it. */
  keepTokens: number | null;
}

/** A worker's own pin counts (its Inspect) for blocks the gateway's records name there. */
export interface WorkerPins {
  type: "WorkerPins";
  at: number;
  worker: string;
  /** pin_count by block hash (0: the worker does not hold a pin on it, or not the block). */
  pins: Map<bigint, number>;
}

export type Observation =
  | TurnStarted
  | TurnFinished
  | SessionIdle
  | WorkerJoined
  | WorkerCleared
  | WorkerStale
  | CommandAcked
  | SessionHint
  | WorkerPins;
export type ObservationType = Observation["type"];
