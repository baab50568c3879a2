// The shape of generated agent programs and floods: every figure here is a published one or is
// named as ours in docs/sim.md ("Generated programs"), which gives each one's source. Sizes are
// given at the reference context of 64K tokens and scale with the context a workload asks for, so
// a program reaches its context limit after about the same number of steps at any size.
import { QuantileTable } from "./random.js";

/** The context the token sizes below are given at. */
export const REFERENCE_CONTEXT = 65536;

export const AGENT_SHAPE = {
  /** User turns (requests) per session: TraceLab's per-session percentiles. */
  turnsPerSession: new QuantileTable([
    [0, 1],
    [0.55, 2],
    [0.9, 18],
    [0.99, 137],
    [1, 140],
  ]),
  /** Tool-initiated steps per user turn: TraceLab's per-request percentiles. */
  stepsPerTurn: new QuantileTable([
    [0, 0],
    [0.3, 1],
    [0.55, 2],
    [0.9, 20],
    [0.99, 86],
    [1, 120],
  ]),
  /** Tool types per tenant, and how skewed their use is (Zipf exponent). */
  toolsPerTenant: 20,
  toolZipf: 1.0,
  /** Each tool's median duration is drawn log-uniformly in this range (s); calls lognormal around it. */
  toolMedianRangeS: [0.5, 8] as [number, number],
  toolSigma: 1.2,
  /** Human idle gap before a user turn, lognormal (s), per gap scale. */
  humanGap: {
    seconds: { medianS: 30, sigma: 1.0 },
    minutes: { medianS: 300, sigma: 1.2 },
  },
  /** The shared prefix at the reference context: a tenant's tool schemas, then an agent's system prompt. */
  toolSchemaTokens: 7800,
  systemPromptTokens: 3000,
  /** Per-tenant and per-agent spread of those sizes (lognormal sigma). */
  prefixSigma: 0.25,
  /** Output tokens per request at the reference context, lognormal; the share that is reasoning. */
  outputMedian: 320,
  outputSigma: 1.0,
  reasoningShare: 0.4,
  /** A user message at the reference context, lognormal. */
  userMedian: 200,
  userSigma: 1.0,
  /** Steps in which the context reaches its compaction point (the appended tool results are sized so). */
  stepsToLimit: 30,
  appendSigma: 1.0,
  /** Compaction: when the prompt would pass this share of the context, the history becomes a summary of this share. */
  compactAtShare: 0.8,
  summaryShare: 0.1,
  /** Upper bounds, as shares of the context, so that no request outgrows its context. */
  maxOutputShare: 0.1,
  maxAppendShare: 0.25,
  maxUserShare: 0.1,
  maxPrefixShare: 0.25,
  /** The client's cache breakpoint after the shared prefix (Anthropic-style, 1 h). */
  cacheTtlS: 3600,
} as const;

export const FLOOD_SHAPE = {
  /** Unrelated requests per agent program, when a flood is on. */
  perProgram: 3,
  promptMedian: 1024,
  promptSigma: 0.7,
  outputMedian: 128,
  outputSigma: 0.7,
} as const;

/** Tool names of a tenant's tool set, most used first (coding-agent tools). */
export const TOOL_NAMES = [
  "read",
  "bash",
  "edit",
  "grep",
  "glob",
  "write",
  "todo_write",
  "ls",
  "web_fetch",
  "task",
  "multi_edit",
  "web_search",
  "notebook_edit",
  "apply_patch",
  "git_diff",
  "run_tests",
  "lint",
  "search_symbols",
  "open_url",
  "mcp_call",
] as const;
