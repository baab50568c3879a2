// The session records and their upkeep (schema.ts folds it into the one schema).
import { z } from "zod";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");
const nonNegative = z.number().min(0, "must be >= 0");

export const sessionsConfigSchema = z
  .strictObject({
    /** JetStream KV bucket holding session records (shared by replicas). */
    bucket: z
      .string()
      .regex(/^[A-Za-z0-9_-]+$/, "must be A-Z a-z 0-9 _ -")
      .default("kvctl_sessions"),
    /** Records expire this long after their last write (s); 0 = never. */
    ttlSeconds: nonNegative.default(86_400),
    /** A session with no turn for this long is reported idle to the policy (s). */
    idleAfterSeconds: nonNegative.default(30),
    /** Commands kept in a record (oldest dropped first). */
    maxCommands: positiveInt.default(64),
    /** How often a replica writes its heartbeat; one silent for 3 of them has its in-flight holds reaped (ms). */
    heartbeatMs: positiveInt.default(2000),
    /** How often each worker's Inspect is read to reconcile pins and notice a restart (ms); 0 = never. */
    inspectMs: nonNegative.default(10_000),
  })
  .default({
    bucket: "kvctl_sessions",
    ttlSeconds: 86_400,
    idleAfterSeconds: 30,
    maxCommands: 64,
    heartbeatMs: 2000,
    inspectMs: 10_000,
  });

export type SessionsConfig = z.output<typeof sessionsConfigSchema>;
