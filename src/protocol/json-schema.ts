// The command contract as JSON Schema (draft 2020-12), generated from the zod schemas: the
// machine-readable form of docs/protocol.md for tools outside this package. `npm run gen:schema` writes
// it to docs/protocol.schema.json; test/protocol-json-schema.test.ts fails when that file is stale.
// What JSON Schema cannot say is stated in `$comment`: the conformance corpus
// (test/fixtures/protocol/) is what both codecs are held to.
import { z } from "zod";
import { AckSchema } from "./ack.js";
import { CommandSchema } from "./commands.js";
import { EnvelopeSchema } from "./envelope.js";
import { int64, int64List } from "./fields.js";
import { INT64_MAX, INT64_MIN } from "./int64.js";
import { stringifyJson } from "./json.js";
import { MAX_LIST_ENTRIES } from "./limits.js";

// zod finalises its output through JSON.stringify, which cannot hold a bigint: the int64 bounds go
// in as markers and are swapped for the exact bigints afterwards.
const MIN_MARK = "@int64-min";
const MAX_MARK = "@int64-max";

/** int64: a JSON integer literal in the signed 64-bit range, or the same number as a decimal string. */
const INT64_JSON = {
  description:
    "Signed 64-bit integer: a JSON integer literal (exact, never rounded) or a decimal string.",
  anyOf: [
    { type: "integer", minimum: MIN_MARK, maximum: MAX_MARK },
    { type: "string", pattern: "^-?(0|[1-9][0-9]*)$", maxLength: 20 },
  ],
};

function jsonSchemaOf(schema: z.ZodType): Record<string, unknown> {
  const out = z.toJSONSchema(schema, {
    io: "input",
    unrepresentable: "any",
    override: (ctx) => {
      const js = ctx.jsonSchema as Record<string, unknown>;
      if (ctx.zodSchema === int64) Object.assign(js, INT64_JSON);
      if (ctx.zodSchema === int64List)
        Object.assign(js, { type: "array", maxItems: MAX_LIST_ENTRIES, items: INT64_JSON });
    },
  }) as Record<string, unknown>;
  delete out.$schema;
  return exactBounds(out) as Record<string, unknown>;
}

function exactBounds(v: unknown): unknown {
  if (v === MIN_MARK) return INT64_MIN;
  if (v === MAX_MARK) return INT64_MAX;
  if (Array.isArray(v)) return v.map(exactBounds);
  if (v && typeof v === "object")
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, exactBounds(x)]));
  return v;
}

/** The whole contract: a body is an Envelope or a bare Command; an Ack answers it. */
export function protocolJsonSchema(): Record<string, unknown> {
  const envelope = jsonSchemaOf(EnvelopeSchema);
  (envelope.properties as Record<string, unknown>).command = { $ref: "#/$defs/Command" };
  return {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: "kvctl command contract (docs/protocol.md)",
    $comment:
      "Generated from src/protocol by `npm run gen:schema`; do not edit. Beyond this schema: every object of a body or " +
      "an ack is refused when a key appears twice (the rejection names it, e.g. command.type: duplicate key); nesting " +
      "deeper than 64 containers is refused; an integer outside int64 is refused, never wrapped or rounded. " +
      "test/fixtures/protocol/ holds the conformance corpus both codecs run.",
    anyOf: [{ $ref: "#/$defs/Envelope" }, { $ref: "#/$defs/Command" }],
    $defs: {
      Envelope: envelope,
      Command: jsonSchemaOf(CommandSchema),
      Ack: jsonSchemaOf(AckSchema),
    },
  };
}

/** The checked-in file's text: two-space indented, int64 bounds exact. */
export function protocolJsonSchemaText(): string {
  return indent(stringifyJson(protocolJsonSchema())) + "\n";
}

/** Re-indents compact JSON (bigint literals included) without re-parsing its numbers. */
function indent(compact: string): string {
  let out = "";
  let depth = 0;
  let inString = false;
  for (let i = 0; i < compact.length; i++) {
    const c = compact[i]!;
    if (inString) {
      out += c;
      if (c === "\\") out += compact[++i];
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      if (compact[i + 1] === close) {
        out += c + close;
        i++;
        continue;
      }
      depth++;
      out += c + "\n" + "  ".repeat(depth);
    } else if (c === "}" || c === "]") {
      depth--;
      out += "\n" + "  ".repeat(depth) + c;
    } else if (c === ",") out += ",\n" + "  ".repeat(depth);
    else if (c === ":") out += ": ";
    else out += c;
  }
  return out;
}
