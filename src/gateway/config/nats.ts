// The NATS link's part of the gateway's configuration (schema.ts folds it into the one schema).
import { z } from "zod";
import { checkSubjectPrefix } from "../../protocol/subjects.js";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

export const natsConfigSchema = z.strictObject({
  url: z.string().min(1).optional(),
  user: z.string().optional(),
  /** Prefer passwordFile or $NATS_PASSWORD: a secret in the file is as readable as the file. */
  password: z.string().optional(),
  passwordFile: z.string().min(1).optional(),
  token: z.string().optional(),
  tokenFile: z.string().min(1).optional(),
  nkeySeedFile: z.string().optional(),
  creds: z.string().optional(),
  tlsCa: z.string().optional(),
  tlsCert: z.string().optional(),
  tlsKey: z.string().optional(),
  tlsHandshakeFirst: z.boolean().optional(),
  subjectPrefix: z
    .string()
    .refine(
      (s) => {
        try {
          checkSubjectPrefix(s);
          return true;
        } catch {
          return false;
        }
      },
      { message: "must be dot-separated tokens of A-Z a-z 0-9 _ -" },
    )
    .optional(),
  inboxPrefix: z.string().optional(),
  /** Time one NATS operation (KV get/put) may take before the gateway goes on without it (ms). */
  opTimeoutMs: positiveInt.default(500),
  /** Time a worker has to ack a command before it is sent again under the same id (ms): a worker
   * applies commands between scheduler turns, so this should exceed its longest turn. */
  commandTimeoutMs: positiveInt.default(1000),
  /** Resends of an unanswered command (the worker answers a resend of an applied one `duplicate`). */
  commandRetries: z.number().int().min(0).default(2),
});

export type NatsConfig = z.output<typeof natsConfigSchema>;
