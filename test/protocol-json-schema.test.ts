// docs/protocol.schema.json is generated from the zod schemas (npm run gen:schema): it must be
// fresh, and it must describe the same ten commands and envelope the codec decodes.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { COMMAND_TYPES, parseJson } from "../src/protocol/index.js";
import { protocolJsonSchemaText } from "../src/protocol/json-schema.js";

const path = join(import.meta.dirname, "..", "docs", "protocol.schema.json");

describe("docs/protocol.schema.json", () => {
  it("is what npm run gen:schema writes today", () => {
    expect(readFileSync(path, "utf8")).toBe(protocolJsonSchemaText());
  });

  it("names every command, strict, with int64 bounds exact", () => {
    const schema = parseJson(readFileSync(path, "utf8")) as any;
    const variants = schema.$defs.Command.oneOf as any[];
    expect(variants.map((v) => v.properties.type.const)).toEqual([...COMMAND_TYPES]);
    for (const v of variants) expect(v.additionalProperties).toBe(false);
    const cache = variants.find((v) => v.properties.type.const === "Cache");
    expect(cache.required).toEqual(["type", "block_hashes", "pin"]);
    expect(cache.properties.block_hashes.items.anyOf[0]).toMatchObject({
      minimum: -(2n ** 63n),
      maximum: 2n ** 63n - 1n,
    });
    const pause = variants.find((v) => v.properties.type.const === "Pause");
    expect(pause.required).toContain("ttl_seconds");
    expect(schema.$defs.Envelope.required).toEqual(["version", "id", "issued_at_ms", "command"]);
    expect(schema.$defs.Ack.required).toEqual(
      expect.arrayContaining(["id", "worker_id", "type", "status", "missing", "elapsed_us"]),
    );
  });
});
