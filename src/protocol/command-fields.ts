// How each command field is written as text (CLI flags, config files): the kind tells a text
// front end how to turn `--block-hashes 111,-222` into the value the schema then checks.
// The schemas stay the authority on what is valid; this table only says how to read text.
import type { CommandType } from "./commands.js";
import { toInt64 } from "./int64.js";

export type FieldKind = "int64[]" | "int64" | "bool" | "int" | "int|null" | "string" | "string[]" | "int[]";

export const COMMAND_FIELDS: Record<CommandType, Record<string, FieldKind>> = {
  Cache: { block_hashes: "int64[]", pin: "bool", ttl_seconds: "int|null" },
  Prune: { after_block_hash: "int64", force: "bool" },
  Think: { block_hashes: "int64[]", transient: "bool" },
  Pause: { block_hashes: "int64[]", ttl_seconds: "int|null", lease_id: "string" },
  RenewLease: { lease_id: "string", new_ttl_seconds: "int" },
  RevokeLease: { lease_id: "string" },
  Warm: { block_keys: "string[]", token_ids: "int[]", target_tier: "string" },
  ToolStart: { session_id: "string", block_hashes: "int64[]" },
  ToolEnd: { session_id: "string", epoch: "int" },
  Inspect: { block_hashes: "int64[]", session_id: "string", lease_id: "string" },
};

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
