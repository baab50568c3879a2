// Options of the hash API (zod-checked; unknown keys are errors, so typos do not pass silently).
import { z } from "zod";

const pageSize = z
  .number()
  .int("must be an integer")
  .min(1, "must be >= 1")
  .max(2 ** 30, "must be <= 2^30");
const name = z.string().nullable().optional();

/** A prior digest: 64 hex chars or 32 bytes (a parent node's last page digest). */
export const priorSchema = z
  .union([
    z.string().regex(/^[0-9a-fA-F]{64}$/, "must be 64 hex chars"),
    z.instanceof(Uint8Array).refine((b) => b.length === 32, "must be 32 bytes"),
  ])
  .nullable()
  .optional();

export const sglangOptionsSchema = z
  .object({
    /** Tokens per page (SGLang --page-size). */
    pageSize,
    /** EAGLE bigram keys: each unit is (t_i, t_{i+1}); N + 1 tokens make N units. */
    bigram: z.boolean().optional(),
    /** RadixKey.extra_key (LoRA id / caller namespace). */
    extraKey: name,
    /** RadixKey.cache_salt. */
    cacheSalt: name,
    /** Continue a chain from this digest (the parent node's last page) instead of the root. */
    prior: priorSchema,
  })
  .strict();

export type SglangOptions = z.input<typeof sglangOptionsSchema>;

export const blockHashOptionsSchema = sglangOptionsSchema
  .extend({
    /**
     * Which publisher the worker runs: "sglang" (default, SGLang's own KV events) namespaces
     * the published hash with extra_key only when it names a registered LoRA adapter
     * (`extraKeyIsLora`) and never with cache_salt; "dynamo" (dynamo_format) uses both.
     */
    eventFormat: z.enum(["sglang", "dynamo"]).optional(),
    /** The worker knows a LoRA name for extraKey (KvEventLoraNames); sglang format only. */
    extraKeyIsLora: z.boolean().optional(),
  })
  .strict();

export type BlockHashOptions = z.input<typeof blockHashOptionsSchema>;

export const mooncakeLayoutSchema = z
  .object({
    /** Config prefix: "{extra_backend_tag}_{model_name with / -> -}" as Mooncake builds it. */
    prefix: z.string().optional(),
    mla: z.boolean().optional(),
    tpRank: z.number().int().min(0).optional(),
    ppRank: z.number().int().min(0).optional(),
    ppSize: z.number().int().min(1).optional(),
    /** should_split_heads: tp_lcm_size / tp_size. */
    splitFactor: z.number().int().min(0).optional(),
  })
  .strict();

export type MooncakeLayout = z.input<typeof mooncakeLayoutSchema>;

export const mooncakeOptionsSchema = sglangOptionsSchema
  .extend({ layout: mooncakeLayoutSchema.optional() })
  .strict();
export type MooncakeOptions = z.input<typeof mooncakeOptionsSchema>;

export const dynamoOptionsSchema = z
  .object({
    /** Tokens per block (Dynamo kv_block_size). */
    blockSize: pageSize,
    /** LoRA adapter name ("" = none). */
    loraName: name,
    /** cache_namespace / cache_salt ("" = none). */
    cacheNamespace: name,
    /** EAGLE: windows of blockSize + 1 tokens with stride blockSize. */
    eagle: z.boolean().optional(),
  })
  .strict();

export type DynamoOptions = z.input<typeof dynamoOptionsSchema>;
