#!/usr/bin/env node
// `npm run lint`: every static check of the project, each reported as passed or failed, exit 1 on
// any finding. `npm run format` (--fix) applies what the tools can fix themselves.
//   tsc        types over src/, test/ and bench/ (tsconfig.json)
//   biome      TypeScript/JavaScript lint (biome.json)
//   ruff       Python lint (ruff.toml), from the project venv (python/setup_venv.sh)
//   clang-format  C++/CUDA under native/ (.clang-format), --dry-run --Werror
//   tests      every test can fail: an assertion in each, no early return (scripts/check-tests.mjs)
//   generated  every generated table equals what its one source generates (scripts/gen-tables.ts
//              --check: the protocol schema from zod, the wire tables from the schema, the native
//              tables from native/events/shared_tables.h; kvctl sim's GPU profiles from
//              AIConfigurator, python/kvctl_sim/profiles/generate.py --check); --fix rewrites them
//   imports    gateway/ and policy/ share only src/contract/; no import circle in src/ (scripts/check-imports.mjs)
//   function-length  no function over 60 lines, as formatted, in src/, bench/ or scripts/ (scripts/check-function-length.mjs)
//   node scripts/lint.mjs [--fix] [--json] [tsc|biome|ruff|clang-format|tests|generated|imports|function-length ...]
// With --json the last line is {"passed": n, "failed": n, "checks": {...}} (test/run-all.mjs reads it).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const fix = args.includes("--fix");
const json = args.includes("--json");
const only = args.filter((a) => !a.startsWith("--"));
const venv = process.env.KVCTL_VENV ?? join(root, ".venv");
const bin = (name) => join(root, "node_modules", ".bin", name);

function nativeSources() {
  const out = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(cpp|cc|h|hpp|cu|cuh)$/.test(e.name)) out.push(relative(root, p));
    }
  };
  walk(join(root, "native"));
  return out.sort();
}

function venvTool(name) {
  const p = join(venv, "bin", name);
  return existsSync(p) ? p : null;
}

const checks = {
  tsc: () => [
    [
      process.execPath,
      [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json", "--noEmit"],
    ],
  ],
  biome: () => [[bin("biome"), fix ? ["check", "--write", "."] : ["check", "."]]],
  ruff: () => {
    const ruff = venvTool("ruff");
    if (!ruff)
      return `ruff not found in ${venv}: run python/setup_venv.sh (python/requirements.txt lists it)`;
    return [[ruff, fix ? ["check", "--fix", "."] : ["check", "."]]];
  },
  tests: () => [[process.execPath, [join(root, "scripts", "check-tests.mjs")]]],
  imports: () => [[process.execPath, [join(root, "scripts", "check-imports.mjs")]]],
  "function-length": () => [
    [process.execPath, [join(root, "scripts", "check-function-length.mjs")]],
  ],
  "clang-format": () => {
    const cf = venvTool("clang-format");
    if (!cf)
      return `clang-format not found in ${venv}: run python/setup_venv.sh (python/requirements.txt lists it)`;
    const files = nativeSources();
    return [[cf, fix ? ["-i", ...files] : ["--dry-run", "--Werror", ...files]]];
  },
  generated: () => [
    [
      process.execPath,
      ["--import", "tsx", join(root, "scripts", "gen-tables.ts"), ...(fix ? [] : ["--check"])],
    ],
    [
      join(venv, "bin", "python"),
      [join(root, "python", "kvctl_sim", "profiles", "generate.py"), ...(fix ? [] : ["--check"])],
    ],
  ],
};

const results = {};
for (const [name, plan] of Object.entries(checks)) {
  if (only.length > 0 && !only.includes(name)) continue;
  const steps = plan();
  let ok = true;
  if (typeof steps === "string") {
    console.error(`lint: ${name}: ${steps}`);
    ok = false;
  } else {
    for (const [cmd, cmdArgs] of steps) {
      console.log(
        `\n$ ${relative(root, cmd) || cmd} ${cmdArgs.length > 8 ? `${cmdArgs.slice(0, 3).join(" ")} ... (${cmdArgs.length} args)` : cmdArgs.join(" ")}`,
      );
      const r = spawnSync(cmd, cmdArgs, { cwd: root, stdio: "inherit" });
      if (r.error) console.error(`lint: ${name}: ${r.error.message}`);
      if (r.status !== 0) ok = false;
    }
  }
  results[name] = ok ? "passed" : "failed";
  console.log(`lint: ${name} ${results[name]}`);
}
const failed = Object.values(results).filter((r) => r === "failed").length;
const passed = Object.values(results).length - failed;
if (json) console.log(JSON.stringify({ passed, failed, checks: results }));
else console.log(`lint: ${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
