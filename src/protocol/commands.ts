// The eleven commands of docs/protocol.md, one zod schema each. Objects are strict: an unknown field is
// far more likely a typo (`ttl_second`) than a feature, and on a privileged plane a typo that is
// silently ignored (a pin without its TTL) is worse than a rejection.
import { z } from "zod";
import {
  count,
  deadlineMs,
  idString,
  int64,
  int64List,
  storageKeyList,
  tokenIdList,
  ttlSeconds,
} from "./fields.js";

export const CacheSchema = z.strictObject({
  type: z.literal("Cache"),
  block_hashes: int64List,
  pin: z.boolean(),
  ttl_seconds: ttlSeconds.nullish(),
});

export const PruneSchema = z.strictObject({
  type: z.literal("Prune"),
  after_block_hash: int64,
  force: z.boolean().nullish(),
});

export const ThinkSchema = z.strictObject({
  type: z.literal("Think"),
  block_hashes: int64List,
  transient: z.boolean(),
});

export const PauseSchema = z.strictObject({
  type: z.literal("Pause"),
  block_hashes: int64List,
  /** null = until revoked (still bounded by the pin budget). The key itself is required. */
  ttl_seconds: ttlSeconds.nullable(),
  lease_id: idString,
});

export const RenewLeaseSchema = z.strictObject({
  type: z.literal("RenewLease"),
  lease_id: idString,
  new_ttl_seconds: ttlSeconds,
});

export const RevokeLeaseSchema = z.strictObject({
  type: z.literal("RevokeLease"),
  lease_id: idString,
  /** false: release the hold only, the blocks left to the cache's own eviction (a session that may
   * still come back). Absent or true: purge them from every tier (a session that ended). */
  purge: z.boolean().nullish(),
});

export const TargetTierSchema = z.enum(["GPU", "CPU_TIER1"]);

export const WarmSchema = z.strictObject({
  type: z.literal("Warm"),
  block_keys: storageKeyList,
  token_ids: tokenIdList.nullish(),
  target_tier: TargetTierSchema,
});

export const ToolStartSchema = z.strictObject({
  type: z.literal("ToolStart"),
  session_id: idString,
  /** The session's path, last block last. */
  block_hashes: int64List,
});

export const ToolEndSchema = z.strictObject({
  type: z.literal("ToolEnd"),
  session_id: idString,
  epoch: count,
});

export const PrefetchSchema = z.strictObject({
  type: z.literal("Prefetch"),
  /** Blocks to bring back to the device (every one must be known to the worker). */
  block_hashes: int64List,
  /** Adds the blocks of this session's tool offload (ToolStart) to the list. */
  session_id: idString.nullish(),
  /** The worker acks by then with what is resident (partial when not all of it). */
  deadline_ms: deadlineMs,
});

export const InspectSchema = z.strictObject({
  type: z.literal("Inspect"),
  block_hashes: int64List.optional(),
  session_id: idString.nullish(),
  lease_id: idString.nullish(),
});

export const COMMAND_TYPES = [
  "Cache",
  "Prune",
  "Think",
  "Pause",
  "RenewLease",
  "RevokeLease",
  "Warm",
  "ToolStart",
  "ToolEnd",
  "Prefetch",
  "Inspect",
] as const;
export const CommandTypeSchema = z.enum(COMMAND_TYPES);

export const CommandSchema = z.discriminatedUnion(
  "type",
  [
    CacheSchema,
    PruneSchema,
    ThinkSchema,
    PauseSchema,
    RenewLeaseSchema,
    RevokeLeaseSchema,
    WarmSchema,
    ToolStartSchema,
    ToolEndSchema,
    PrefetchSchema,
    InspectSchema,
  ],
  {
    error: (iss) =>
      iss.code === "invalid_union"
        ? `unknown command type ${describeType(iss.input)} (expected one of ${COMMAND_TYPES.join(", ")})`
        : undefined,
  },
);

function describeType(input: unknown): string {
  const t = input && typeof input === "object" ? (input as { type?: unknown }).type : undefined;
  return t === undefined ? "(missing)" : JSON.stringify(t);
}

export type CommandType = (typeof COMMAND_TYPES)[number];
export type Cache = z.output<typeof CacheSchema>;
export type Prune = z.output<typeof PruneSchema>;
export type Think = z.output<typeof ThinkSchema>;
export type Pause = z.output<typeof PauseSchema>;
export type RenewLease = z.output<typeof RenewLeaseSchema>;
export type RevokeLease = z.output<typeof RevokeLeaseSchema>;
export type Warm = z.output<typeof WarmSchema>;
export type ToolStart = z.output<typeof ToolStartSchema>;
export type ToolEnd = z.output<typeof ToolEndSchema>;
export type Prefetch = z.output<typeof PrefetchSchema>;
export type Inspect = z.output<typeof InspectSchema>;
/** A validated command: hashes are bigint. */
export type Command = z.output<typeof CommandSchema>;
