// The limits towards the workers: body size, upstream deadlines, pooled connections, the command
// queue (schema.ts folds it into the one schema).
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

export const limitsConfigSchema = z
  .strictObject({
    /** Largest request body accepted (bytes); larger ones get 413. */
    bodyLimitBytes: positiveInt.default(16 * 1024 * 1024),
    /** Time to open a connection to a worker (ms). */
    upstreamConnectTimeoutMs: positiveInt.default(10_000),
    /** Time to a worker's response headers on a streamed call or one that generates nothing
     * (models, tokenize, count_tokens) (ms). Not applied to a non-streamed generation, whose
     * headers come with its last byte (see upstreamResponseTimeoutMs). */
    upstreamHeadersTimeoutMs: positiveInt.default(300_000),
    /** Longest a non-streamed generation may run before its answer (ms); 0: no limit while the
     * worker passes health (a worker that keeps failing it is drained and its calls end). */
    upstreamResponseTimeoutMs: z
      .number()
      .int("must be an integer")
      .min(0, "must be >= 0")
      .default(0),
    /** Longest silence between two chunks of a worker's answer (ms). */
    upstreamIdleTimeoutMs: positiveInt.default(300_000),
    /** Pooled connections per worker. */
    connectionsPerWorker: positiveInt.default(256),
    /** Policy commands waiting for NATS; beyond this new ones are dropped and counted. */
    commandQueue: positiveInt.default(1024),
  })
  .default({
    bodyLimitBytes: 16 * 1024 * 1024,
    upstreamConnectTimeoutMs: 10_000,
    upstreamHeadersTimeoutMs: 300_000,
    upstreamResponseTimeoutMs: 0,
    upstreamIdleTimeoutMs: 300_000,
    connectionsPerWorker: 256,
    commandQueue: 1024,
  });

export type LimitsConfig = z.output<typeof limitsConfigSchema>;
