// The generated tables (scripts/gen-tables.ts): the committed ones are current, and the check that
// `npm run lint` runs (`generated`) fails, naming the file, when any one of them is edited by hand.
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generatedFiles, NATIVE_HEADER, staleFiles } from "../scripts/gen-tables.js";
import { wireModel } from "../scripts/tables/wire.js";

const root = join(import.meta.dirname, "..");
const read = (p: string) => readFileSync(join(root, p), "utf8");
const generated = generatedFiles(read).map((f) => f.path);
const scratch = mkdtempSync(join(tmpdir(), "kvctl-tables-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A copy of every generated file and the native header, under a fresh root. */
function copyTree(name: string): string {
  const dir = join(scratch, name);
  for (const p of [...generated, NATIVE_HEADER]) {
    mkdirSync(dirname(join(dir, p)), { recursive: true });
    cpSync(join(root, p), join(dir, p));
  }
  return dir;
}

/** One edit a person might make by hand to each generated file. */
const HAND_EDITS: Record<string, [string, string]> = {
  "docs/protocol.schema.json": ['"maxItems": 65536', '"maxItems": 65537'],
  "src/protocol/wire-tables.ts": ['["pin", "bool", "required"]', '["pin", "bool", "nullish"]'],
  "python/kvctl_worker/wire_tables.py": ["MAX_HASHES = 65536", "MAX_HASHES = 100000"],
  "src/native-tables.ts": ['"too_large", "too_many_events"', '"too_many_events", "too_large"'],
};

describe("generated tables", () => {
  it("the committed ones are what their sources generate", () => {
    expect(generated).toEqual(Object.keys(HAND_EDITS));
    expect(staleFiles(root)).toEqual([]);
  });

  for (const [path, [from, to]] of Object.entries(HAND_EDITS)) {
    it(`a hand edit of ${path} fails the check, naming that file alone`, () => {
      const dir = copyTree(path.replace(/\W/g, "_"));
      const text = readFileSync(join(dir, path), "utf8");
      expect(text).toContain(from);
      writeFileSync(join(dir, path), text.replace(from, to));
      expect(staleFiles(dir)).toEqual([path]);
    });
  }

  it("the lint check's command exits 1 and names the edited file", () => {
    const dir = copyTree("cli");
    const py = join(dir, "python/kvctl_worker/wire_tables.py");
    writeFileSync(
      py,
      readFileSync(py, "utf8").replace(
        "TTL_MIN, TTL_MAX = 1, 2592000",
        "TTL_MIN, TTL_MAX = 0, 2592000",
      ),
    );
    const args = [
      "--import",
      "tsx",
      join(root, "scripts", "gen-tables.ts"),
      "--check",
      "--root",
      dir,
    ];
    const r = spawnSync(process.execPath, args, { cwd: root, encoding: "utf8" });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      "python/kvctl_worker/wire_tables.py differs from what its source generates",
    );
    const clean = spawnSync(
      process.execPath,
      ["--import", "tsx", join(root, "scripts", "gen-tables.ts"), "--check"],
      { cwd: root, encoding: "utf8" },
    );
    expect(clean.status).toBe(0);
  });

  it("a field shape the generator does not know is refused, naming the field", () => {
    const schema = JSON.parse(
      read("docs/protocol.schema.json").replace(/-?9223372036854775\d{3}/g, "0"),
    );
    const cache = schema.$defs.Command.oneOf[0];
    cache.properties.pin = { type: "string", format: "date-time" };
    expect(() => wireModel(JSON.stringify(schema))).toThrow(
      /Cache\.pin: a field shape the table generator does not know/,
    );
  });
});
