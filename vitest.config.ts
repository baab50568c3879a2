import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // GPU suites run only through `npm run test:gpu`.
    exclude: ["test/gpu/**", "test/fixtures/**", "**/node_modules/**"],
    // Real servers (nats-server, python workers) start per suite; give them room on a 2-core box
    // that other jobs keep busy (these are deadlines for hangs, not synchronisation).
    testTimeout: 180_000,
    hookTimeout: 300_000,
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2,
  },
});
