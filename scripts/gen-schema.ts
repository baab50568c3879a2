// Writes docs/protocol.schema.json from the zod schemas (src/protocol/json-schema.ts).
//   npm run gen:schema            rewrite it
//   npm run gen:schema -- --check exit 1 when the checked-in file is stale
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { protocolJsonSchemaText } from "../src/protocol/json-schema.js";

const path = join(dirname(fileURLToPath(import.meta.url)), "..", "docs", "protocol.schema.json");
const text = protocolJsonSchemaText();
if (process.argv.includes("--check")) {
  let old = "";
  try {
    old = readFileSync(path, "utf8");
  } catch {}
  if (old !== text) {
    console.error("docs/protocol.schema.json is stale: run npm run gen:schema");
    process.exit(1);
  }
} else {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
  console.log(`wrote ${path}`);
}
