// How each command field is written as text (CLI flags, config files): the kind tells a text
// front end how to turn `--block-hashes 111,-222` into the value the schema then checks.
// The schemas stay the authority on what is valid; the table (generated from
// docs/protocol.schema.json into wire-tables.ts) only says how to read text.
import { toInt64 } from "./int64.js";
import { COMMAND_FIELDS, type FieldKind } from "./wire-tables.js";

export { COMMAND_FIELDS, type FieldKind };

/** Text -> a value of the given kind; throws with a message that does not need the field name. */
export function parseFieldText(kind: FieldKind, text: string): unknown {
  const list = (t: string) => (t.trim() === "" ? [] : t.split(",").map((s) => s.trim()));
  switch (kind) {
    case "int64[]":
      return list(text).map((s) => int64Text(s));
    case "int64":
      return int64Text(text.trim());
    case "bool":
      if (text === "true" || text === "1") return true;
      if (text === "false" || text === "0") return false;
      throw new Error(`expected true or false, got ${JSON.stringify(text)}`);
    case "int|null":
      if (text === "null" || text === "none") return null;
      return intText(text);
    case "int":
      return intText(text);
    case "int[]":
      return list(text).map(intText);
    case "string[]":
      return list(text);
    case "string":
      return text;
  }
}

function int64Text(s: string): bigint {
  const v = toInt64(s);
  if (typeof v === "string") throw new Error(v);
  return v;
}

function intText(s: string): number {
  if (!/^-?\d+$/.test(s.trim())) throw new Error(`expected an integer, got ${JSON.stringify(s)}`);
  const n = Number(s);
  if (!Number.isSafeInteger(n)) throw new Error(`${s} is too large`);
  return n;
}
