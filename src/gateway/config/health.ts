// The workers' health checks (schema.ts folds it into the one schema).
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

export const healthConfigSchema = z
  .strictObject({
    intervalMs: positiveInt.default(2000),
    /** SGLang's /health runs a one-token generation and answers after a second at the earliest. */
    timeoutMs: positiveInt.default(5000),
    /** Consecutive failed checks before a worker is drained. */
    failures: positiveInt.default(3),
    /** A worker drained for failing health takes no new traffic at once; its calls under way
     * are cut only if it still fails health this long after (ms; 0: at once). A worker busy
     * enough to answer /health late keeps its work; a dead one's calls still end. */
    cutCallsAfterMs: z.number().int("must be an integer").min(0, "must be >= 0").default(30_000),
  })
  .default({ intervalMs: 2000, timeoutMs: 5000, failures: 3, cutCallsAfterMs: 30_000 });

export type HealthConfig = z.output<typeof healthConfigSchema>;
