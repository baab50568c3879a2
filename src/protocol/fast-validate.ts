// A zod-free fast path for the commands and envelopes on every round trip. It only ever ACCEPTS
// what the zod schemas in commands.ts / envelope.ts accept, with the same output; on anything
// unusual it returns null and the caller runs the schema, which is also what names the bad field.
// test/protocol-schemas.test.ts holds the two to the same answers.
import { type Command, type CommandType, TargetTierSchema } from "./commands.js";
import { ID_PATTERN, STORAGE_KEY_PATTERN } from "./fields.js";
import { INT64_MAX, INT64_MIN, toInt64 } from "./int64.js";
import {
  ENVELOPE_VERSION,
  MAX_ID_LENGTH,
  MAX_LIST_ENTRIES,
  MAX_PREFETCH_DEADLINE_MS,
  MAX_TOKEN_IDS,
  MAX_TTL_SECONDS,
} from "./limits.js";
import { COMMAND_SPECS, type FieldCheck } from "./wire-tables.js";
// Module-local copies: the hot loops read them per hash, and a bundler may turn an imported
// binding into a getter call.
const MIN = INT64_MIN;
const MAX = INT64_MAX;

const FAIL = Symbol("fail");
const TIER_SET: ReadonlySet<unknown> = new Set(TargetTierSchema.options);

function int64(v: unknown): bigint | typeof FAIL {
  // The hot case (a bigint in range) inline; the rest is int64.ts's one decision.
  if (typeof v === "bigint" && v >= MIN && v <= MAX) return v;
  const r = toInt64(v);
  return typeof r === "bigint" ? r : FAIL;
}

/** An id: 1..MAX_ID_LENGTH printable ASCII characters (idString, without zod). */
export function isId(v: unknown): v is string {
  return typeof v === "string" && v.length >= 1 && v.length <= MAX_ID_LENGTH && ID_PATTERN.test(v);
}

/** A non-negative safe integer (count, without zod). */
export function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

/**
 * An int64 list (int64List, without zod), or null. `owned`: the array was just decoded and nobody
 * else holds it, so it is converted in place (and may be left half converted on null).
 */
export function int64ListOf(v: unknown, owned: boolean): bigint[] | null {
  if (!Array.isArray(v) || v.length > MAX_LIST_ENTRIES) return null;
  const out = owned ? (v as unknown[]) : new Array<bigint>(v.length);
  for (let i = 0; i < v.length; i++) {
    const x = int64(v[i]);
    if (x === FAIL) return null;
    out[i] = x;
  }
  return out as bigint[];
}

function check(kind: FieldCheck, v: unknown, owned: boolean): unknown {
  switch (kind) {
    case "int64[]":
      // (an owned array left half converted on failure is fine: the schema reads bigints too)
      return int64ListOf(v, owned) ?? FAIL;
    case "int64":
      return int64(v);
    case "bool":
      return typeof v === "boolean" ? v : FAIL;
    case "ttl":
      return typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_TTL_SECONDS
        ? v
        : FAIL;
    case "deadline":
      return typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_PREFETCH_DEADLINE_MS
        ? v
        : FAIL;
    case "id":
      return isId(v) ? v : FAIL;
    case "count":
      return isCount(v) ? v : FAIL;
    case "keys":
      return Array.isArray(v) &&
        v.length <= MAX_LIST_ENTRIES &&
        v.every((k) => typeof k === "string" && STORAGE_KEY_PATTERN.test(k))
        ? [...v]
        : FAIL;
    case "tokens":
      return Array.isArray(v) &&
        v.length <= MAX_TOKEN_IDS &&
        v.every((t) => typeof t === "number" && Number.isInteger(t) && t >= 0 && t <= 2 ** 31 - 1)
        ? [...v]
        : FAIL;
    case "tier":
      return TIER_SET.has(v) ? v : FAIL;
  }
}

/**
 * The validated command, or null: "ask the schema". `owned`: the input was just decoded and
 * nobody else holds it, so lists may be converted in place instead of copied.
 */
export function fastCommand(raw: unknown, owned = false): Command | null {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return null;
  const obj = raw as Record<string, unknown>;
  // The specs are generated from docs/protocol.schema.json (wire-tables.ts), as the Python codec's are.
  const spec = COMMAND_SPECS[obj.type as CommandType];
  if (!spec || !Object.hasOwn(COMMAND_SPECS, obj.type as string)) return null;
  let seen = 1; // `type`
  const out: Record<string, unknown> = { type: obj.type };
  for (const [field, kind, presence] of spec) {
    if (!Object.hasOwn(obj, field)) {
      if (presence === "required" || presence === "nullable") return null;
      continue;
    }
    seen++;
    const v = obj[field];
    if (v === undefined) return null; // explicit undefined: leave the subtleties to zod
    if (v === null) {
      if (presence === "nullable" || presence === "nullish") {
        out[field] = null;
        continue;
      }
      return null;
    }
    const r = check(kind, v, owned);
    if (r === FAIL) return null;
    out[field] = r;
  }
  // Strict objects: any key outside the spec goes to the schema (which rejects it by name).
  if (Object.keys(obj).length !== seen) return null;
  return out as Command;
}

/** A validated envelope's parts, or null: "ask the schema". `raw` must be freshly decoded (owned). */
export function fastEnvelope(
  raw: Record<string, unknown>,
): { id: string; issuedAtMs: number; command: Command } | null {
  if (raw.version !== ENVELOPE_VERSION) return null;
  const id = raw.id;
  const at = raw.issued_at_ms;
  if (!isId(id) || !isCount(at)) return null;
  if (Object.keys(raw).length !== 4 || !Object.hasOwn(raw, "command")) return null;
  const command = fastCommand(raw.command, true);
  return command ? { id, issuedAtMs: at, command } : null;
}
