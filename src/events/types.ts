// Engine-neutral KV event types. Engine wire differences (SGLang tagged maps, SGLang's older
// positional arrays with a metadata map, vLLM positional and map forms) stay in the native
// decoder's adapters (native/events/adapters); the rest of kvctl sees only these shapes.
import { TIERS } from "../native-tables.js";

/** Raised for a payload that cannot be decoded as a batch at all. */
export class BatchDecodeError extends Error {
  /** Why, as the native decoder names it: msgpack, shape, too_large or too_many_events. */
  readonly kind: string;
  constructor(message: string, kind = "msgpack") {
    super(message);
    this.kind = kind;
  }
}

/** Storage tiers, in Dynamo's query order (device first): the native decoder's tier numbers. */
export { TIERS };
export type Tier = (typeof TIERS)[number];
export const TIER_INDEX = Object.fromEntries(TIERS.map((t, i) => [t, i])) as Record<Tier, number>;

/**
 * Maps an engine's medium string onto a tier, as Dynamo's StorageTier::from_kv_medium does
 * (absent/empty/unknown -> GPU, the default device tier). Returns undefined only for a medium
 * that is present, non-empty and unknown when `strict` is set.
 */
export function tierOfMedium(medium: string | null | undefined, strict?: false): Tier;
export function tierOfMedium(medium: string | null | undefined, strict: boolean): Tier | undefined;
export function tierOfMedium(medium: string | null | undefined, strict = false): Tier | undefined {
  if (medium == null || medium === "") return "GPU";
  switch (medium.toUpperCase()) {
    case "GPU":
    case "DEVICE":
      return "GPU";
    case "CPU":
    case "CPU_PINNED":
    case "CPU_TIER1":
      return "CPU_PINNED";
    case "CPU_TIER2":
    case "DISK":
    case "NVME":
    case "STORAGE":
      return "DISK";
    case "EXTERNAL":
    case "NETWORK":
    case "REMOTE":
    case "SHARED":
      return "EXTERNAL";
    default:
      return strict ? undefined : "GPU";
  }
}

export interface BlockStoredEvent {
  type: "BlockStored";
  /** Engine block hashes, normalised to signed int64. One per page (coalesced events carry many). */
  blockHashes: bigint[];
  /** The block the first page chains from; null at the radix root. */
  parentBlockHash: bigint | null;
  /** Token ids of all pages, concatenated (EAGLE bigram pages flattened to pairs, see `bigram`). */
  tokenIds: number[];
  /** Tokens per page as the engine reported it. */
  blockSize: number;
  loraId: number | null;
  /** Raw medium string as sent (null when absent). */
  medium: string | null;
  tier: Tier;
  cacheSalt: string | null;
  sessionId: string | null;
  loraName: string | null;
  /** True when token_ids came as bigram pairs ([t_i, t_i+1]); tokenIds then holds 2 ids a unit. */
  bigram: boolean;
}

export interface BlockRemovedEvent {
  type: "BlockRemoved";
  blockHashes: bigint[];
  medium: string | null;
  tier: Tier;
}

export interface AllBlocksClearedEvent {
  type: "AllBlocksCleared";
}

export type KvEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

export interface KvEventBatch {
  ts: number;
  events: KvEvent[];
  dpRank: number | null;
}

/** One event the decoder refused, with why; the rest of its batch still applies. */
export interface BadEvent {
  index: number;
  reason: string;
  /** not_an_event, unknown_tag, fields, hash, tokens, block_size or medium. */
  kind?: string;
}

export interface DecodedBatch {
  batch: KvEventBatch;
  bad: BadEvent[];
  /** Which wire form the batch used (for `watch` and logs). */
  form: "array" | "map";
}
