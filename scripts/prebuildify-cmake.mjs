#!/usr/bin/env node
// `npm run prebuildify [-- --strip]`: prebuildify, with cmake-js doing the build. prebuildify drives
// `node-gyp rebuild` in its working folder and then moves build/Release/*.node into
// prebuilds/<platform>-<arch>/; we hand it this (executable) script as its "node-gyp" and a
// scratch folder as that working folder: the script builds through scripts/build-native.mjs
// (CMake, incremental, into the repo's build/) and copies the addon into the scratch folder, so
// the repo's build/Release/kvctl.node never disappears while tests load it.
// Result: prebuilds/<platform>-<arch>/node.napi.<libc>.node (N-API 8: one file for every
// Node >= 20), which node-gyp-build (src/addon.ts) picks up when build/Release has no addon.
// KVCTL_PREBUILD_ARGS passes flags to build-native.mjs (e.g. "--cuda=off").
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const self = fileURLToPath(import.meta.url);
const root = join(dirname(self), "..");

if (process.argv[2] === "rebuild") {
  // Called by prebuildify as `node-gyp rebuild --target=...` in the scratch folder: N-API needs no
  // per-target build.
  const args = (process.env.KVCTL_PREBUILD_ARGS ?? "").split(" ").filter(Boolean);
  const r = spawnSync(process.execPath, [join(root, "scripts", "build-native.mjs"), ...args], {
    cwd: root,
    stdio: "inherit",
  });
  if (r.status !== 0) process.exit(r.status ?? 1);
  const out = join(process.cwd(), "build", "Release");
  mkdirSync(out, { recursive: true });
  copyFileSync(join(root, "build", "Release", "kvctl.node"), join(out, "kvctl.node"));
  process.exit(0);
}

const scratch = mkdtempSync(join(tmpdir(), "kvctl-prebuildify-"));
const require = createRequire(import.meta.url);
const prebuildify = require("prebuildify");
prebuildify(
  {
    cwd: scratch,
    out: root,
    napi: true,
    strip: process.argv.includes("--strip"),
    name: "node.napi",
    tagLibc: true,
    targets: [{ runtime: "node", target: process.versions.node }],
    nodeGyp: self,
    shell: false,
  },
  (err) => {
    rmSync(scratch, { recursive: true, force: true });
    if (err) {
      console.error(`prebuildify-cmake: ${err.message}`);
      process.exit(1);
    }
    const dir = join(root, "prebuilds", `${process.platform}-${process.arch}`);
    const file = readdirSync(dir).find((f) => f.startsWith("node.napi") && f.endsWith(".node"));
    console.log(
      `prebuildify-cmake: wrote prebuilds/${process.platform}-${process.arch}/${file ?? ""}`,
    );
  },
);
