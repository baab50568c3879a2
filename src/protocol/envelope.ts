// The message body: an envelope `{version, id, issued_at_ms, command}` (what we send) or a bare
// command (the original format, accepted forever). Decoding never throws: it returns either the
// command or a validation error that names the field, ready to become a `rejected` ack.
import { z } from "zod";
import { type Command, CommandSchema, type CommandType, COMMAND_TYPES } from "./commands.js";
import { CommandValidationError, fieldPath, fromZodError } from "./errors.js";
import { fastCommand, fastEnvelope } from "./fast-validate.js";
import { count, idString } from "./fields.js";
import { JsonDuplicateKeyError, JsonSyntaxError, parseJson, stringifyJson } from "./json.js";
import { ENVELOPE_VERSION } from "./limits.js";
import { uuidv7 } from "./uuidv7.js";

export const EnvelopeSchema = z.strictObject({
  version: z.literal(ENVELOPE_VERSION, {
    error: (iss) =>
      `unsupported envelope version ${JSON.stringify(iss.input)} (this side speaks ${ENVELOPE_VERSION})`,
  }),
  id: idString,
  issued_at_ms: count,
  command: CommandSchema,
});
export type Envelope = z.output<typeof EnvelopeSchema>;

/** Checks a command built in code; throws CommandValidationError naming the field. */
export function validateCommand(command: unknown): Command {
  const fast = fastCommand(command);
  if (fast) return fast;
  const r = CommandSchema.safeParse(command);
  if (!r.success) throw fromZodError(r.error);
  return r.data;
}

/** Wraps a validated command in a fresh envelope (new UUIDv7 idempotency id). */
export function makeEnvelope(
  command: Command,
  id: string = uuidv7(),
  issuedAtMs: number = Date.now(),
): Envelope {
  return { version: ENVELOPE_VERSION, id, issued_at_ms: issuedAtMs, command };
}

/** Envelope -> JSON text, hashes as exact number literals. */
export function encodeEnvelope(envelope: Envelope): string {
  // Written by hand in contract order; the id is validated printable ASCII, so it needs no escaping.
  return `{"version":${envelope.version},"id":${JSON.stringify(envelope.id)},"issued_at_ms":${envelope.issued_at_ms},"command":${stringifyJson(envelope.command)}}`;
}

export type DecodedBody =
  | { ok: true; bare: boolean; id: string | null; issuedAtMs: number | null; command: Command }
  | {
      ok: false;
      bare: boolean;
      id: string | null;
      type: CommandType | null;
      error: CommandValidationError;
    };

/** Bytes or text off the wire -> a command, or a rejection naming the field. Never throws. */
export function decodeBody(body: string | Uint8Array): DecodedBody {
  let raw: unknown;
  try {
    raw = parseJson(body);
  } catch (e) {
    if (e instanceof JsonDuplicateKeyError) {
      return {
        ok: false,
        bare: false,
        id: null,
        type: null,
        error: new CommandValidationError([{ field: fieldPath(e.path), message: "duplicate key" }]),
      };
    }
    const msg = e instanceof JsonSyntaxError ? e.message : String(e);
    return {
      ok: false,
      bare: false,
      id: null,
      type: null,
      error: new CommandValidationError([{ field: "body", message: `not JSON: ${msg}` }]),
    };
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return {
      ok: false,
      bare: false,
      id: null,
      type: null,
      error: new CommandValidationError([{ field: "body", message: "expected a JSON object" }]),
    };
  }
  const obj = raw as Record<string, unknown>;
  // An envelope has `command` or `version`; anything else is read as a bare command.
  const bare = !("command" in obj) && !("version" in obj);
  if (bare) {
    const fast = fastCommand(obj, true);
    if (fast) return { ok: true, bare, id: null, issuedAtMs: null, command: fast };
    const r = CommandSchema.safeParse(obj);
    if (r.success) return { ok: true, bare, id: null, issuedAtMs: null, command: r.data };
    return { ok: false, bare, id: null, type: typeOf(obj), error: fromZodError(r.error) };
  }
  const fast = fastEnvelope(obj);
  if (fast) return { ok: true, bare, ...fast };
  const r = EnvelopeSchema.safeParse(obj);
  if (r.success)
    return {
      ok: true,
      bare,
      id: r.data.id,
      issuedAtMs: r.data.issued_at_ms,
      command: r.data.command,
    };
  // Echo the id and type when they are readable, so the sender can match the rejection.
  const id = typeof obj.id === "string" && idString.safeParse(obj.id).success ? obj.id : null;
  const inner =
    obj.command && typeof obj.command === "object" ? (obj.command as Record<string, unknown>) : {};
  return { ok: false, bare, id, type: typeOf(inner), error: fromZodError(r.error) };
}

function typeOf(obj: Record<string, unknown>): CommandType | null {
  return (COMMAND_TYPES as readonly unknown[]).includes(obj.type)
    ? (obj.type as CommandType)
    : null;
}
