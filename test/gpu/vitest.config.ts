// The GPU suites (`npm run test:gpu`): `vitest run --config test/gpu/vitest.config.ts`.
// The default config excludes test/gpu/ so `npm test` never runs them.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  root: fileURLToPath(new URL("../..", import.meta.url)),
  test: {
    include: ["test/gpu/**/*.test.ts"],
    testTimeout: 120_000,
    pool: "forks",
    maxWorkers: 1,
  },
});
