// The shared conformance corpus (test/fixtures/protocol/, written by its generate.mjs) run against
// the TypeScript codec. python/tests/test_conformance.py runs the very same files against the
// Python codec: the two readings of docs/protocol.md agree on every case or one of them fails.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { COMMAND_FIELDS } from "../src/protocol/command-fields.js";
import {
  AckDecodeError,
  decodeAck,
  decodeBody,
  encodeAck,
  encodeAckBytes,
  stringifyJson,
} from "../src/protocol/index.js";

const dir = join(import.meta.dirname, "fixtures", "protocol");
type Repeat = [string, string, number, string];
interface Case {
  name: string;
  body?: string;
  body_base64?: string;
  repeat?: Repeat[];
  valid: boolean;
  normalised?: string;
  canonical?: string;
  field?: string;
}
const load = (name: string): Case[] =>
  (JSON.parse(readFileSync(join(dir, name), "utf8")) as { cases: Case[] }).cases;
const commands = load("commands.json");
const acks = load("acks.json");

function expand(text: string, repeat: Repeat[] | undefined): string {
  for (const [marker, item, count, sep] of repeat ?? [])
    text = text.replace(marker, new Array(count).fill(item).join(sep));
  return text;
}
function bodyOf(c: Case): string | Uint8Array {
  return c.body_base64 !== undefined
    ? new Uint8Array(Buffer.from(c.body_base64, "base64"))
    : expand(c.body!, c.repeat);
}

/** The corpus's normalised form: envelope parts and every schema field, absent ones null, in the
 * contract schema's order (docs/protocol.schema.json, the one the generator reads too). */
const schema = JSON.parse(
  readFileSync(join(dir, "../../../docs/protocol.schema.json"), "utf8"),
) as {
  $defs: { Command: { oneOf: { properties: Record<string, { const?: string }> }[] } };
};
const FIELDS: Record<string, string[]> = Object.fromEntries(
  schema.$defs.Command.oneOf.map((c) => [
    c.properties.type!.const!,
    Object.keys(c.properties).filter((k) => k !== "type"),
  ]),
);
function normalised(
  id: string | null,
  issuedAtMs: number | null,
  command: Record<string, unknown>,
): string {
  const cmd: Record<string, unknown> = { type: command.type };
  for (const k of FIELDS[command.type as string]!) cmd[k] = command[k] ?? null;
  return stringifyJson({ id, issued_at_ms: issuedAtMs, command: cmd });
}

describe("protocol conformance corpus", () => {
  it("reads field order from the schema, which the CLI's field table follows too", () => {
    expect(Object.keys(FIELDS).sort()).toEqual(Object.keys(COMMAND_FIELDS).sort());
    for (const [type, fields] of Object.entries(FIELDS))
      expect(Object.keys(COMMAND_FIELDS[type as keyof typeof COMMAND_FIELDS])).toEqual(fields);
  });

  it("is fresh (generate.mjs --check) and large enough to mean something", () => {
    execFileSync(process.execPath, [join(dir, "generate.mjs"), "--check"], { stdio: "pipe" });
    expect(commands.length + acks.length).toBeGreaterThanOrEqual(150);
    expect(commands.filter((c) => c.valid).length).toBeGreaterThan(50);
    expect(commands.filter((c) => !c.valid).length).toBeGreaterThan(100);
  });

  it.each(commands.map((c) => [c.name, c] as const))("command: %s", (_name, c) => {
    const r = decodeBody(bodyOf(c));
    if (c.valid) {
      expect(r.ok ? "" : r.error.message).toBe("");
      if (!r.ok) return;
      expect(normalised(r.id, r.issuedAtMs, r.command as unknown as Record<string, unknown>)).toBe(
        expand(c.normalised!, c.repeat),
      );
    } else {
      expect(r.ok).toBe(false);
      if (r.ok) return;
      expect(r.error.field).toBe(c.field);
    }
  });

  it.each(acks.map((c) => [c.name, c] as const))("ack: %s", (_name, c) => {
    if (c.valid) {
      const ack = decodeAck(c.body!);
      expect(encodeAck(ack)).toBe(c.canonical);
      expect(Buffer.from(encodeAckBytes(ack)).toString("utf8")).toBe(c.canonical);
    } else {
      let err: unknown;
      try {
        decodeAck(c.body!);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(AckDecodeError);
      expect((err as AckDecodeError).field).toBe(c.field);
    }
  });
});
