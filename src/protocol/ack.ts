// The Ack (docs/protocol.md "Ack"): one per request, with a typed outcome and counts. Field names and
// order are exactly the contract's; `missing` holds int64 hashes written as JSON number literals.
import { z } from "zod";
import { CommandTypeSchema, type CommandType } from "./commands.js";
import { fieldPath, fromZodError } from "./errors.js";
import { count, idString, int64List } from "./fields.js";
import { int64ListOf, isCount, isId } from "./fast-validate.js";
import { JsonDuplicateKeyError, parseJson, stringifyInt64List, stringifyJson } from "./json.js";
import { ACK_KEYS } from "./wire-tables.js";

export const ACK_STATUSES = [
  "applied",
  "partial",
  "noop",
  "duplicate",
  "rejected",
  "error",
] as const;
export const AckStatusSchema = z.enum(ACK_STATUSES);
export type AckStatus = (typeof ACK_STATUSES)[number];

/** Tiers a worker may report effects on (docs/protocol.md names GPU and CPU_PINNED; others pass). */
export const TiersSchema = z.record(z.string().min(1), count);

/** The lease a Pause/RenewLease/Inspect ack refers to. Extra keys are tolerated for later. */
export const AckLeaseSchema = z.looseObject({
  lease_id: idString,
  expires_at_ms: count.nullable(),
});
export type AckLease = z.output<typeof AckLeaseSchema>;

// Loose: a worker may add keys (an Inspect report, say) without breaking older routers; the
// contract's own fields are all required and typed.
export const AckSchema = z.looseObject({
  /** The envelope's id; null for a bare command or a body too broken to carry one. */
  id: idString.nullable(),
  worker_id: z.string().min(1),
  /** null when the body was not readable enough to know the command type. */
  type: CommandTypeSchema.nullable(),
  status: AckStatusSchema,
  requested: count,
  affected: count,
  skipped: count,
  missing: int64List,
  reason: z.string().nullable(),
  tiers: TiersSchema,
  lease: AckLeaseSchema.nullable(),
  epoch: count.nullable(),
  elapsed_us: count,
});
export type Ack = z.output<typeof AckSchema>;

/** Ack -> JSON text, contract field order, hashes exact. */
export function encodeAck(ack: Ack): string {
  let out =
    `{"id":${ack.id === null ? "null" : JSON.stringify(ack.id)},"worker_id":${JSON.stringify(ack.worker_id)},` +
    `"type":${ack.type === null ? "null" : `"${ack.type}"`},"status":"${ack.status}",` +
    `"requested":${ack.requested},"affected":${ack.affected},"skipped":${ack.skipped},` +
    `"missing":${stringifyInt64List(ack.missing)},"reason":${ack.reason === null ? "null" : JSON.stringify(ack.reason)},` +
    `"tiers":${stringifyJson(ack.tiers)},"lease":${ack.lease === null ? "null" : stringifyJson(ack.lease)},` +
    `"epoch":${ack.epoch === null ? "null" : ack.epoch},"elapsed_us":${ack.elapsed_us}`;
  for (const key of Object.keys(ack)) {
    if (!ACK_KEY_SET.has(key))
      out += `,${JSON.stringify(key)}:${stringifyJson((ack as Record<string, unknown>)[key])}`;
  }
  return out + "}";
}
const ACK_KEY_SET: ReadonlySet<string> = new Set(ACK_KEYS);

export class AckDecodeError extends Error {
  /** The offending field's dotted path (`lease.lease_id`), or `body` when it is not JSON. */
  readonly field: string;
  constructor(message: string, field = "body") {
    super(message);
    this.name = "AckDecodeError";
    this.field = field;
  }
}

/** JSON text or bytes -> a validated Ack; throws AckDecodeError naming the field. */
export function decodeAck(body: string | Uint8Array): Ack {
  let raw: unknown;
  try {
    raw = parseJson(body);
  } catch (e) {
    // Acks follow the commands' rule: a repeated key is refused, naming it (`lease.lease_id`).
    if (e instanceof JsonDuplicateKeyError) {
      const field = fieldPath(e.path);
      throw new AckDecodeError(`invalid ack: ${field}: duplicate key`, field);
    }
    throw new AckDecodeError(`ack is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  const fast = fastAck(raw);
  if (fast) return fast;
  const r = AckSchema.safeParse(raw);
  if (!r.success) {
    const err = fromZodError(r.error);
    throw new AckDecodeError(`invalid ack: ${err.message}`, err.field);
  }
  return r.data;
}

const STATUS_SET: ReadonlySet<unknown> = new Set(ACK_STATUSES);
const TYPE_SET: ReadonlySet<unknown> = new Set(CommandTypeSchema.options);

/**
 * The same checks as AckSchema for the common shape of an ack (every field plain, `lease` null),
 * without zod's per-field overhead: acks are on every command's round trip. Returns null when
 * anything is unusual, and the caller falls back to the schema, which also names the field.
 */
function fastAck(raw: unknown): Ack | null {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return null;
  const a = raw as Record<string, unknown>;
  if (!(a.id === null || isId(a.id))) return null;
  if (typeof a.worker_id !== "string" || a.worker_id.length === 0) return null;
  if (!(a.type === null || TYPE_SET.has(a.type)) || !STATUS_SET.has(a.status)) return null;
  if (
    !isCount(a.requested) ||
    !isCount(a.affected) ||
    !isCount(a.skipped) ||
    !isCount(a.elapsed_us)
  )
    return null;
  if (!(a.reason === null || typeof a.reason === "string") || a.lease !== null) return null;
  if (!(a.epoch === null || isCount(a.epoch))) return null;
  const tiers = a.tiers;
  if (tiers === null || typeof tiers !== "object" || Array.isArray(tiers)) return null;
  for (const k in tiers) if (!k || !isCount((tiers as Record<string, unknown>)[k])) return null;
  // `raw` was parsed just now by decodeAck and nobody else holds it: convert in place, no copy.
  const missing = int64ListOf(a.missing, true);
  if (!missing) return null;
  a.missing = missing;
  return a as Ack;
}

/** A blank ack to fill in (all counts zero, nothing missing). */
export function blankAck(
  workerId: string,
  id: string | null,
  type: CommandType | null,
  status: AckStatus,
): Ack {
  return {
    id,
    worker_id: workerId,
    type,
    status,
    requested: 0,
    affected: 0,
    skipped: 0,
    missing: [],
    reason: null,
    tiers: {},
    lease: null,
    epoch: null,
    elapsed_us: 0,
  };
}
