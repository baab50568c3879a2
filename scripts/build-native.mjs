#!/usr/bin/env node
// Builds the native addon (build/Release/kvctl.node) and the core's C++ tests with cmake-js
// (configure + build, Ninja when available, 2 jobs).
//   node scripts/build-native.mjs [--if-missing] [--cuda=auto|require|off] [--out DIR] [--debug]
// --if-missing: do nothing when a prebuild for this platform exists in prebuilds/, or the built
//               addon is newer than every native source (what `npm install` runs).
// --cuda=auto (default): CUDA kernels when nvcc is found; require: fail without nvcc; off.
// Everything the build needs besides cmake and a compiler comes from npm (devDependencies:
// cmake-js, node-addon-api, node-api-headers, and xxhash-addon for xxhash.h). An installed
// package with no prebuild for its platform lands here too; when a tool is missing it prints one
// message naming all of them and fails.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const flag = (name) => args.includes(`--${name}`);
const option = (name, def) => {
  const i = args.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return def;
  return args[i].includes("=") ? args[i].slice(args[i].indexOf("=") + 1) : args[i + 1];
};

const cuda = option("cuda", process.env.KVCTL_CUDA ?? "auto");
const out = option("out", "build");
if (!["auto", "require", "on", "off"].includes(cuda)) {
  console.error(`build-native: --cuda must be auto, require or off (got '${cuda}')`);
  process.exit(2);
}

function newestSourceMtime() {
  let newest = statSync(join(root, "CMakeLists.txt")).mtimeMs;
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  walk(join(root, "native"));
  return newest;
}

function prebuildMtime() {
  const dir = join(root, "prebuilds", `${process.platform}-${process.arch}`);
  if (!existsSync(dir)) return null;
  const files = readdirSync(dir).filter((f) => f.endsWith(".node"));
  return files.length > 0 ? Math.max(...files.map((f) => statSync(join(dir, f)).mtimeMs)) : null;
}
const hasPrebuild = () => prebuildMtime() !== null;

function findNvcc() {
  if (process.env.CUDACXX && existsSync(process.env.CUDACXX)) return process.env.CUDACXX;
  const dirs = (process.env.PATH ?? "").split(delimiter).concat(["/usr/local/cuda/bin"]);
  for (const d of dirs) if (d && existsSync(join(d, "nvcc"))) return join(d, "nvcc");
  return null;
}

if (flag("if-missing")) {
  const addon = join(root, out, "Release", "kvctl.node");
  // An installed package uses its prebuild; in a clone (.git), a prebuild older than an edited
  // native source is stale and the addon is built.
  const prebuilt = prebuildMtime();
  const clone = existsSync(join(root, ".git"));
  if (prebuilt !== null && (!clone || prebuilt >= newestSourceMtime())) {
    console.log(
      "build-native: a prebuild for this platform exists in prebuilds/; skipping the build",
    );
    process.exit(0);
  }
  if (existsSync(addon) && statSync(addon).mtimeMs >= newestSourceMtime()) {
    console.log(`build-native: ${addon} is up to date; skipping the build`);
    process.exit(0);
  }
}

const nvcc = cuda === "off" ? null : findNvcc();
if ((cuda === "require" || cuda === "on") && !nvcc) {
  console.error(
    "build-native: --cuda=require but nvcc was not found (set CUDACXX or put nvcc on PATH)",
  );
  process.exit(1);
}
const cudaMode = cuda === "off" ? "off" : cuda === "auto" ? (nvcc ? "auto" : "off") : "on";

const onPath = (cmd) => spawnSync(cmd, ["--version"], { stdio: "ignore" }).status === 0;
const require = createRequire(join(root, "package.json"));
const resolves = (pkg) => {
  try {
    return require.resolve(`${pkg}/package.json`);
  } catch {
    return null;
  }
};
// The build packages are resolved from the package root (hoisted or nested), like CMakeLists.txt does.
const buildPackages = ["cmake-js", "node-addon-api", "node-api-headers", "xxhash-addon"];
const missingPackages = buildPackages.filter((p) => !resolves(p));
const compiler = process.env.CXX ?? ["c++", "g++", "clang++"].find(onPath);
const missingTools = [
  onPath("cmake") ? null : "cmake (>= 3.18)",
  compiler && onPath(compiler) ? null : "a C++17 compiler (g++ or clang++)",
].filter(Boolean);
if (missingPackages.length > 0 || missingTools.length > 0) {
  const what = [...missingTools];
  if (missingPackages.length > 0)
    what.push(`the npm build packages (npm install --no-save ${missingPackages.join(" ")})`);
  const prebuild = hasPrebuild()
    ? ""
    : ` There is no prebuilt addon for ${process.platform}-${process.arch} in prebuilds/, so it must be built from source.`;
  console.error(
    `build-native: cannot build the kvctl native addon.${prebuild} Install ${what.join(", ")}, then run \`npm rebuild kvctl\` (or \`npm run build:native\` in a clone).`,
  );
  process.exit(1);
}

const cmakeJs = join(dirname(resolves("cmake-js")), "bin", "cmake-js");
const common = ["--out", out, `--CDKVCTL_CUDA=${cudaMode}`];
if (nvcc) common.push(`--CDCMAKE_CUDA_COMPILER=${nvcc}`);
if (flag("debug")) common.push("--debug");
if (onPath("ninja")) common.push("--generator", "Ninja");

// Configure every time (quick on an existing tree) so a changed --cuda reaches the CMake cache;
// `cmake-js compile` alone would reuse the old configuration.
console.log(
  `build-native: cmake-js into ${out}/ (CUDA: ${cudaMode}${nvcc ? `, nvcc ${nvcc}` : ""})`,
);
const env = { ...process.env, CMAKE_BUILD_PARALLEL_LEVEL: "2" };
for (const step of [
  ["configure", ...common],
  ["build", ...common, "--parallel", "2"],
]) {
  const r = spawnSync(process.execPath, [cmakeJs, ...step], { cwd: root, stdio: "inherit", env });
  if (r.status !== 0) {
    console.error(`build-native: cmake-js ${step[0]} failed (see the compiler output above)`);
    process.exit(r.status ?? 1);
  }
}
