// The agent policies' settings: one zod schema, a key of the gateway config (`policies`). Every
// policy can be switched off on its own; every number a decision uses is here, with its default.
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");
const nonNegative = z.number().min(0, "must be >= 0");
const fraction = z.number().min(0, "must be >= 0").max(1, "must be <= 1");

export const pinsConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** Pinned blocks the gateway asks of one worker at most (its view of the worker's pin budget). */
  budgetBlocks: positiveInt.default(4096),
  /** Pinned blocks across all workers at most (unset: no global cap beyond the per-worker one). */
  globalBudgetBlocks: positiveInt.optional(),
  /** Pinned blocks one session may hold on a worker, whatever rule asks (unset: no cap but the budget). */
  sessionCapBlocks: positiveInt.optional(),
  /** TTL for OpenAI prompt_cache_retention "in_memory" (OpenAI clears it after 5-10 idle minutes). */
  inMemoryTtlSeconds: positiveInt.default(600),
  /** TTL for prompt_cache_retention "24h" (and the cap on any marker's TTL). */
  longTtlSeconds: positiveInt.default(86_400),
  /** A hit re-pins (refreshes) a block once less than this fraction of its TTL is left. */
  refreshBelow: fraction.default(0.5),
});

export const inflightConfigSchema = z.strictObject({
  /** Off by default: on top of program admission it added nothing measurable in either regime of
   * the agent bench (docs/agent-defaults.md). Turn it on without program admission, when queued
   * requests lose their cached prefix to the prefills ahead of them. */
  enabled: z.boolean().default(false),
  /** Requests whose cached prefix is shorter than this (in blocks) are not held. */
  minBlocks: positiveInt.default(1),
  /** TTL of the hold: released when the turn ends, or by the worker after this at the latest. */
  maxHoldSeconds: positiveInt.default(120),
});

export const toolsConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** Mean tool duration assumed before a tool has samples (exponential prior). */
  priorMeanSeconds: z.number().positive().default(5),
  /** Samples of a tool before its empirical distribution replaces the prior. */
  minSamples: positiveInt.default(8),
  /** Samples kept per tool (oldest dropped). */
  maxSamples: positiveInt.default(256),
  /** Tool names tracked (further names share one "*" distribution). */
  maxTools: positiveInt.default(256),
  /** Candidate keep-resident TTLs; the best one by expected net benefit wins. */
  tauCandidatesSeconds: z.array(positiveInt).min(1).default([1, 2, 5, 10, 20, 30, 60, 120, 300]),
  /** Prefill rate used to price a re-prefill of the session's tokens. */
  prefillTokensPerSecond: z.number().positive().default(4000),
  /** Exchange rate: seconds of prefill one device block held for one second is worth. */
  holdCostPerBlockSecond: nonNegative.default(0.0001),
  /** How long a worker holds an offload whose ToolEnd never comes (its tool_ttl_s): the budget
   * view counts the hold that long at most. */
  offloadHoldSeconds: positiveInt.default(900),
});

export const thinkConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** Model name substrings (case-insensitive) of families that replay reasoning through tool loops. */
  interleavedModels: z
    .array(z.string().min(1))
    .default(["glm-4.5", "glm-4.6", "glm-4.7", "glm-5", "kimi-k2", "minimax-m2", "claude"]),
});

export const idleConfigSchema = z.strictObject({
  /** Off by default: on top of program admission it added nothing measurable in either regime of
   * the agent bench (docs/agent-defaults.md). Turn it on when sessions sit idle for minutes on
   * workers whose device pool is full and whose host pool has room for them. */
  enabled: z.boolean().default(false),
  /** Lease on a paused session's blocks. */
  leaseSeconds: positiveInt.default(300),
  /** Most of a worker's pin budget paused sessions may hold (the rest stays for requests in flight,
   * tool calls and prompt-cache markers, whose blocks come back sooner or surely). */
  budgetShare: fraction.default(0.5),
  /** Device blocks per worker; with it the pressure rule pauses idle sessions (without it: idle only). */
  deviceBlocks: positiveInt.optional(),
  /** Pause the largest idle sessions once the worker's working set passes this fraction ... */
  highWatermark: fraction.default(0.95),
  /** ... until it is back under this one. */
  lowWatermark: fraction.default(0.8),
});

export const pruneConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** A session's end (its close hint, or its record expiring) prunes the branch only it stood on. */
  onClose: z.boolean().default(true),
});

export const warmConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** The workers have a storage backend (HiCache L3) Warm can read from; without it no Warm is sent. */
  storage: z.boolean().default(false),
  /** Hottest pinned prefixes sent to a cold worker. */
  maxPrefixes: positiveInt.default(8),
  targetTier: z.enum(["GPU", "CPU_TIER1"]).default("CPU_TIER1"),
});

export const guardsConfigSchema = z.strictObject({
  /** Commands per second per worker (token bucket); releases always pass but use tokens too. */
  commandsPerSecond: z.number().positive().default(200),
  burst: positiveInt.default(400),
  /** The same command (type, worker, target) twice within this window is sent once. */
  coalesceMs: nonNegative.default(1000),
});

function defaults<T extends z.ZodType>(s: T): z.output<T> {
  return s.parse({});
}

/** Program admission's retention decision (priced with the tool and idle settings, and these). */
export const retentionConfigSchema = z.strictObject({
  /** Host -> device load rate a parked program's restore is priced at. */
  restoreTokensPerSecond: z.number().positive().default(40_000),
  /** Worker seconds one host block held for a second is worth. */
  hostHoldCostPerBlockSecond: nonNegative.default(0.00001),
});

export const policiesConfigSchema = z
  .strictObject({
    pins: pinsConfigSchema.default(defaults(pinsConfigSchema)),
    retention: retentionConfigSchema.default(defaults(retentionConfigSchema)),
    inflight: inflightConfigSchema.default(defaults(inflightConfigSchema)),
    tools: toolsConfigSchema.default(defaults(toolsConfigSchema)),
    think: thinkConfigSchema.default(defaults(thinkConfigSchema)),
    idle: idleConfigSchema.default(defaults(idleConfigSchema)),
    prune: pruneConfigSchema.default(defaults(pruneConfigSchema)),
    warm: warmConfigSchema.default(defaults(warmConfigSchema)),
    guards: guardsConfigSchema.default(defaults(guardsConfigSchema)),
  })
  .refine((c) => c.idle.lowWatermark < c.idle.highWatermark, {
    message: "idle.lowWatermark must be below idle.highWatermark",
    path: ["idle", "lowWatermark"],
  });

export type PoliciesConfig = z.output<typeof policiesConfigSchema>;
export type PoliciesConfigInput = z.input<typeof policiesConfigSchema>;

export function defaultPoliciesConfig(): PoliciesConfig {
  return policiesConfigSchema.parse({});
}
