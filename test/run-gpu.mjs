#!/usr/bin/env node
// `npm run test:gpu`: the GPU suites (test/gpu/**/*.gpu.test.ts) through vitest with their own
// config (test/gpu/vitest.config.ts). On a CUDA host it first builds the CUDA addon
// (build-cuda/Release/kvctl.node, `npm run build:cuda`) when missing; the suites load it. Without a
// GPU every suite still runs and skips with one line saying why. Extra arguments go to vitest
// (e.g. a file filter: `npm run test:gpu -- copy`).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const gpu = spawnSync("nvidia-smi", ["-L"], { encoding: "utf8" });
const hasGpu = gpu.status === 0 && /GPU \d+:/.test(gpu.stdout ?? "");
console.log(
  hasGpu
    ? `test:gpu: ${gpu.stdout.trim().split("\n").join("; ")}`
    : "test:gpu: no NVIDIA GPU found (nvidia-smi -L); the GPU suites will skip",
);

const cudaAddon = join(root, "build-cuda", "Release", "kvctl.node");
if (hasGpu && !existsSync(cudaAddon) && !process.env.KVCTL_ADDON) {
  console.log("test:gpu: building the CUDA addon (npm run build:cuda)");
  const b = spawnSync(
    process.execPath,
    [join(root, "scripts/build-native.mjs"), "--cuda=require", "--out", "build-cuda"],
    { cwd: root, stdio: "inherit" },
  );
  if (b.status !== 0) {
    console.error("test:gpu: the CUDA build failed");
    process.exit(b.status ?? 1);
  }
}

const vitest = join(root, "node_modules", ".bin", "vitest");
const r = spawnSync(
  vitest,
  ["run", "--config", join(root, "test/gpu/vitest.config.ts"), ...process.argv.slice(2)],
  { cwd: root, stdio: "inherit" },
);
if (r.error) throw r.error;
process.exit(r.status ?? 1);
