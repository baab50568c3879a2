#!/usr/bin/env node
// `npm run prebuildify`: prebuildify, with cmake-js doing the build. prebuildify drives
// `node-gyp rebuild`; we hand it this (executable) script as its "node-gyp", which builds through
// scripts/build-native.mjs (CMake) and leaves build/Release/kvctl.node where prebuildify looks.
// Result: prebuilds/<platform>-<arch>/node.napi.<libc>.node (N-API 8: one file for every
// Node >= 20), which node-gyp-build (src/addon.ts) picks up when build/Release has no addon.
// KVCTL_PREBUILD_ARGS passes flags to build-native.mjs (e.g. "--cuda=off").
import { spawnSync } from "node:child_process";
import { copyFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const self = fileURLToPath(import.meta.url);
const root = join(dirname(self), "..");

if (process.argv[2] === "rebuild") {
  // Called by prebuildify as `node-gyp rebuild --target=...`: N-API needs no per-target build.
  const r = spawnSync(process.execPath, [join(root, "scripts", "build-native.mjs"), ...(process.env.KVCTL_PREBUILD_ARGS ?? "").split(" ").filter(Boolean)], {
    cwd: root,
    stdio: "inherit",
  });
  process.exit(r.status ?? 1);
}

const require = createRequire(import.meta.url);
const prebuildify = require("prebuildify");
prebuildify(
  {
    cwd: root,
    napi: true,
    strip: process.argv.includes("--strip"),
    name: "node.napi",
    tagLibc: true,
    targets: [{ runtime: "node", target: process.versions.node }],
    nodeGyp: self,
    shell: false,
  },
  (err) => {
    if (err) {
      console.error(`prebuildify-cmake: ${err.message}`);
      process.exit(1);
    }
    // prebuildify moves the addon out of build/Release; put a copy back for local use.
    const dir = join(root, "prebuilds", `${process.platform}-${process.arch}`);
    const file = readdirSync(dir).find((f) => f.startsWith("node.napi") && f.endsWith(".node"));
    if (file) copyFileSync(join(dir, file), join(root, "build", "Release", "kvctl.node"));
    console.log(`prebuildify-cmake: wrote prebuilds/${process.platform}-${process.arch}/${file ?? ""}`);
  },
);
