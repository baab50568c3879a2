// Writes every generated table from its one source, or checks that the committed ones are current:
//   docs/protocol.schema.json        <- the zod schemas (src/protocol/json-schema.ts)
//   src/protocol/wire-tables.ts      <- docs/protocol.schema.json (fast validator, CLI kinds, ack keys)
//   python/kvctl_worker/wire_tables.py <- docs/protocol.schema.json (the Python codec's schema, limits)
//   src/native-tables.ts             <- native/events/shared_tables.h (tiers, refusal kinds, counters)
//   npm run gen:tables                 rewrite them (npm run gen:schema is the same command)
//   npm run gen:tables -- --check      exit 1 naming each stale file (`npm run lint`, check `generated`)
//   --root DIR                         read and write under DIR instead of this checkout
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { protocolJsonSchemaText } from "../src/protocol/json-schema.js";
import { nativeTablesTs } from "./tables/native.js";
import { renderPy, renderTs, wireModel } from "./tables/wire.js";

export const SCHEMA_PATH = "docs/protocol.schema.json";
export const NATIVE_HEADER = "native/events/shared_tables.h";

/** Each generated file's path (relative to the root) and the text its source generates. */
export function generatedFiles(read: (path: string) => string): { path: string; text: string }[] {
  const schema = protocolJsonSchemaText();
  // The tables follow the schema as the zod schemas write it now, so a stale schema file shows up
  // once (as itself), not again as every table.
  const model = wireModel(schema);
  return [
    { path: SCHEMA_PATH, text: schema },
    { path: "src/protocol/wire-tables.ts", text: renderTs(model) },
    { path: "python/kvctl_worker/wire_tables.py", text: renderPy(model) },
    { path: "src/native-tables.ts", text: nativeTablesTs(read(NATIVE_HEADER)) },
  ];
}

/** The generated files whose committed text differs from what their source generates. */
export function staleFiles(root: string): string[] {
  const read = (p: string) => readFileSync(join(root, p), "utf8");
  return generatedFiles(read)
    .filter(({ path, text }) => {
      try {
        return read(path) !== text;
      } catch {
        return true;
      }
    })
    .map((f) => f.path);
}

function main(argv: string[]): number {
  const at = argv.indexOf("--root");
  const root = at >= 0 ? argv[at + 1]! : join(dirname(fileURLToPath(import.meta.url)), "..");
  if (argv.includes("--check")) {
    const stale = staleFiles(root);
    for (const p of stale)
      console.error(`${p} differs from what its source generates: run npm run gen:tables`);
    return stale.length > 0 ? 1 : 0;
  }
  for (const { path, text } of generatedFiles((p) => readFileSync(join(root, p), "utf8"))) {
    writeFileSync(join(root, path), text);
    console.log(`wrote ${path}`);
  }
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1])
  process.exitCode = main(process.argv.slice(2));
