// The package as a user gets it: `npm run prebuildify`, `npm pack`, then the tarball installed into
// an empty ESM project with a PATH that has no cmake and no C++ compiler. The prebuilt addon must
// load (node-gyp-build), every entry of the exports map must import and type-check from a
// consumer (`tsc --module nodenext`), the CLI must run, internals must be unreachable, and a
// platform without a prebuild must fail its source build with one message naming what to install.
// publint and attw (esm-only profile: the package is ESM, CommonJS consumers use import()) run on
// the same tarball.
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "./helpers/python.js";

const work = mkdtempSync(join(tmpdir(), "kvctl-pack-"));
const consumer = join(work, "consumer");
const installed = join(consumer, "node_modules", "kvctl");
const bin = (name: string) => join(repoRoot, "node_modules", ".bin", name);
let tarball = "";
let noCompilerPath = "";

function run(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, {
    cwd: opts.cwd ?? repoRoot,
    env: opts.env ?? process.env,
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.error) throw r.error;
  return r;
}

function ok(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0) throw new Error(`${what} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

// A PATH of links to every program on the real PATH except build tools, so npm, node and sh work
// while cmake and every C/C++ compiler are missing, as on a machine that has none.
const BUILD_TOOLS =
  /^(cmake|ctest|cpack|ccmake|ninja|make|gmake|cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|ld|as)(-[\d.]+)?$|-(gcc|g\+\+|c\+\+|cc|ld|as)(-[\d.]+)?$/;
function pathWithoutCompilers(): string {
  const dir = join(work, "bin");
  mkdirSync(dir);
  for (const d of (process.env.PATH ?? "").split(delimiter)) {
    if (!d || !existsSync(d)) continue;
    for (const name of readdirSync(d)) {
      if (BUILD_TOOLS.test(name) || existsSync(join(dir, name))) continue;
      try {
        symlinkSync(join(d, name), join(dir, name));
      } catch {
        // a name that cannot be linked (already taken by an earlier PATH entry) is skipped like PATH would
      }
    }
  }
  return dir;
}

const exportsMap = (): Record<string, string> =>
  JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).exports;

beforeAll(() => {
  ok(run("npm", ["run", "prebuildify"]), "npm run prebuildify");
  ok(run("npm", ["pack", "--pack-destination", work]), "npm pack");
  tarball = join(work, readdirSync(work).find((f) => f.endsWith(".tgz")) ?? "");
  noCompilerPath = pathWithoutCompilers();
  mkdirSync(consumer);
  writeFileSync(
    join(consumer, "package.json"),
    JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" }),
  );
  const env = { ...process.env, PATH: noCompilerPath };
  expect(spawnSync("cmake", ["--version"], { env }).error).toBeDefined();
  expect(spawnSync("g++", ["--version"], { env }).error).toBeDefined();
  ok(
    run(
      "npm",
      ["install", tarball, "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"],
      { cwd: consumer, env },
    ),
    "npm install <tarball>",
  );
}, 600_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("the packed tarball in an empty ESM project without a compiler", () => {
  it("carries the prebuilt N-API addon and installs without building it", () => {
    const prebuilds = readdirSync(
      join(installed, "prebuilds", `${process.platform}-${process.arch}`),
    );
    expect(prebuilds.some((f) => /^node\.napi(\.glibc|\.musl)?\.node$/.test(f))).toBe(true);
    expect(existsSync(join(installed, "build"))).toBe(false);
    // Build-time packages are devDependencies: a consumer with a prebuild does not need them
    // (node-addon-api may still arrive through another dependency).
    const deps = Object.keys(
      JSON.parse(readFileSync(join(installed, "package.json"), "utf8")).dependencies ?? {},
    );
    for (const pkg of ["cmake-js", "node-addon-api", "node-api-headers", "xxhash-addon"])
      expect(deps).not.toContain(pkg);
    for (const pkg of ["cmake-js", "xxhash-addon"])
      expect(existsSync(join(consumer, "node_modules", pkg)), pkg).toBe(false);
  });

  it("imports every entry point of the exports map at run time", () => {
    const entries = Object.keys(exportsMap()).filter((k) => k !== "./package.json");
    expect(entries.length).toBeGreaterThanOrEqual(8);
    const script = `
      const entries = ${JSON.stringify(entries)};
      const out = {};
      for (const e of entries) {
        const spec = "kvctl" + e.slice(1);
        const m = await import(spec);
        out[spec] = Object.keys(m).length;
      }
      const { ControlPublisher } = await import("kvctl");
      const { blockHashes } = await import("kvctl/hash");
      out.publisher = typeof ControlPublisher.prototype.send;
      out.hash = blockHashes([1, 2, 3, 4], { pageSize: 2 }).length;
      console.log(JSON.stringify(out));`;
    const r = JSON.parse(
      ok(
        run(process.execPath, ["--input-type=module", "-e", script], { cwd: consumer }),
        "import entries",
      ),
    );
    for (const e of entries) expect(r[`kvctl${e.slice(1)}`], e).toBeGreaterThan(0);
    expect(r.publisher).toBe("function");
    expect(r.hash).toBe(2); // two full pages hashed by the prebuilt addon
  });

  it("type-checks a consumer file with tsc --module nodenext", () => {
    writeFileSync(
      join(consumer, "consumer.ts"),
      `import { type Ack, type Command, ControlPublisher, connectControlPlane, parseJson } from "kvctl";
import { decodeAck } from "kvctl/protocol";
import { ControlPublisher as SamePublisher } from "kvctl/control";
import { KvEventConsumer } from "kvctl/events";
import { InMemoryKvIndex } from "kvctl/index";
import { blockHashes } from "kvctl/hash";
import { applySeries } from "kvctl/patch";
import { ReferenceResponder, startNatsServer } from "kvctl/testing";

export async function pinSystemPrompt(url: string): Promise<Ack> {
  const nc = await connectControlPlane({ servers: url });
  const publisher: SamePublisher = new ControlPublisher(nc);
  const hashes: BigInt64Array = blockHashes([1, 2, 3, 4], { pageSize: 2 });
  const cmd: Command = { type: "Cache", block_hashes: [...hashes], pin: true };
  // @ts-expect-error: send() takes a worker id first; a wrongly typed (or any-typed) API fails here
  publisher.send(cmd);
  return publisher.send("w0", cmd);
}
export const used = [decodeAck, KvEventConsumer, InMemoryKvIndex, applySeries, ReferenceResponder, startNatsServer, parseJson];
`,
    );
    writeFileSync(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2022",
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ["node"],
          typeRoots: [join(repoRoot, "node_modules", "@types")],
        },
        files: ["consumer.ts"],
      }),
    );
    const r = run(
      process.execPath,
      [join(repoRoot, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"],
      { cwd: consumer },
    );
    expect(`${r.stdout}${r.stderr}`).toBe("");
    expect(r.status).toBe(0);
  });

  it("runs `npx kvctl --help` and `npx kvctl hash` from the installed bin", () => {
    const env = { ...process.env, PATH: noCompilerPath };
    const help = ok(
      run("npx", ["--no-install", "kvctl", "--help"], { cwd: consumer, env }),
      "npx kvctl --help",
    );
    expect(help).toMatch(/usage: kvctl/);
    const out = ok(
      run(
        "npx",
        [
          "--no-install",
          "kvctl",
          "hash",
          "--scheme",
          "sglang",
          "--page-size",
          "2",
          "--tokens",
          "[1,2,3,4]",
          "--json",
        ],
        { cwd: consumer, env },
      ),
      "npx kvctl hash",
    );
    expect(out).toMatch(/-?\d{6,}/);
  });

  it("refuses an internal path with ERR_PACKAGE_PATH_NOT_EXPORTED", () => {
    const script = `import("kvctl/dist/control/publisher.js").then(() => console.log("imported"), (e) => console.log(e.code));`;
    const out = ok(
      run(process.execPath, ["--input-type=module", "-e", script], { cwd: consumer }),
      "internal import",
    );
    expect(out.trim()).toBe("ERR_PACKAGE_PATH_NOT_EXPORTED");
  });

  it("without a prebuild for the platform, the source build fails with one message naming what to install", () => {
    rmSync(join(installed, "prebuilds"), { recursive: true, force: true });
    const r = run(
      process.execPath,
      [join(installed, "scripts", "build-native.mjs"), "--if-missing"],
      { cwd: installed, env: { ...process.env, PATH: noCompilerPath } },
    );
    expect(r.status).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    for (const what of [
      "no prebuilt addon",
      "cmake",
      "C++17 compiler",
      "cmake-js",
      "xxhash-addon",
    ]) {
      expect(lines[0]).toContain(what);
    }
  });

  it("is clean under publint and attw", () => {
    const publint = run(bin("publint"), ["run", tarball, "--strict"]);
    expect(publint.status, publint.stdout + publint.stderr).toBe(0);
    expect(publint.stdout).toMatch(/All good/);
    const attw = run(bin("attw"), [tarball, "--profile", "esm-only", "--format", "json"]);
    expect(attw.status, attw.stdout + attw.stderr).toBe(0);
  });

  it("leaves the repo's own addon in place (prebuildify builds in a scratch folder)", () => {
    expect(statSync(join(repoRoot, "build", "Release", "kvctl.node")).size).toBeGreaterThan(0);
  });
});
