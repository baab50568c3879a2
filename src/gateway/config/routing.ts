// How turns are routed to workers (schema.ts folds it into the one schema).
import { z } from "zod";

const nonNegative = z.number().min(0, "must be >= 0");

export const routingConfigSchema = z.strictObject({
  /** sgl-model-gateway: above this match rate (matched blocks / request blocks) the best match wins. */
  cacheThreshold: z.number().min(0).max(1).default(0.3),
  /** Pick the least-loaded worker when max - min in-flight exceeds this ... */
  balanceAbsThreshold: nonNegative.default(64),
  /** ... and max > min * this. */
  balanceRelThreshold: z.number().min(1).default(1.5),
  /** How long a session sticks to its worker after its last turn (s). */
  sessionAffinityTtlSeconds: nonNegative.default(600),
  /** A session's turn is routed like a new one when its worker's device pool cannot hold it beside
   * the prompts in flight there (their blocks once each, the turn's blocks not among them, and
   * an answer as long as the worker's recent ones for each,
   * against that worker's /server_info max_total_num_tokens); off by default,
   * on by default under the agent policy (withAgentDefaults). */
  sessionYieldsWhenFull: z.boolean().default(false),
  /** Tokenize prompts on a worker before routing when the index holds blocks ("auto") or never. */
  tokenize: z.enum(["auto", "never"]).default("auto"),
  /** Dynamo scorer settings (src/index/scoring.ts ScoringConfig), e.g. sharedCacheMultiplier. */
  scoring: z
    .strictObject({
      overlapScoreCredit: z.number().optional(),
      overlapScoreCreditDecay: z.number().optional(),
      prefillLoadScale: z.number().optional(),
      hostCacheHitWeight: z.number().optional(),
      diskCacheHitWeight: z.number().optional(),
      sharedCacheMultiplier: z.number().optional(),
      decodeActiveRequestWeight: z.number().optional(),
      temperature: z.number().min(0).optional(),
    })
    .default({}),
});

export type RoutingConfig = z.output<typeof routingConfigSchema>;
