// A real patched SGLang server on CPU for vitest suites (one per suite file: start it in
// beforeAll, stop it in afterAll). The launch recipe is python/kvctl_testbed/server.py, reached
// through src/demo/real-server.ts; this file only re-exports it with small request helpers.
export {
  type RealServer as SglangServer,
  type RealServerInfo as SglangServerInfo,
  type RealServerOptions as SglangServerOptions,
  startRealServer as startSglangServer,
  flood,
  generate,
  type GenerateResult,
  randomTokens,
} from "../../src/demo/real-server.js";

/** Token ids for tests: `n` ids from `start`, kept clear of the tiny model's special tokens (0..7). */
export function tokens(start: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => 8 + ((start + i) % 1000));
}
