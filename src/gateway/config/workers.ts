// A worker's entry in the gateway's configuration (the `workers` list, the admin API's body).
import { z } from "zod";
import { checkWorkerId } from "../../protocol/subjects.js";
import { workerCredentialFields } from "../auth/config.js";

const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");

const workerId = z.string().refine(
  (s) => {
    try {
      checkWorkerId(s);
      return true;
    } catch {
      return false;
    }
  },
  { message: "must be 1-128 characters from A-Z a-z 0-9 _ - (and not 'broadcast')" },
);

const httpUrl = z
  .string()
  .refine((s) => /^https?:\/\/[^/\s]+\/?$/.test(s), { message: "must be http(s)://host:port" });
const ZMQ_ENDPOINT = /^tcp:\/\/[^\s]+:\d+$/;
const zmqEndpoint = z
  .string()
  .refine((s) => ZMQ_ENDPOINT.test(s), { message: "must be tcp://host:port" });

/** A worker whose KV events come from NVIDIA Dynamo's event plane (docs/dynamo.md). */
export const workerDynamoSchema = z.strictObject({
  /**
   * Dynamo's ZMQ event-plane PUB for this worker (its discovery record's event_channels endpoint),
   * or "nats": Dynamo's NATS event plane (`--event-plane nats`), read on the gateway's own NATS
   * connection (`nats`), which must then be configured.
   */
  events: z.string().refine((s) => s === "nats" || ZMQ_ENDPOINT.test(s), {
    message: 'must be tcp://host:port or "nats"',
  }),
  /** Dynamo's id of the worker (decimal, the worker_id of its events), mapped to this kvctl worker. */
  workerId: z.string().regex(/^\d{1,20}$/, "must be Dynamo's decimal worker id"),
  /** Tokens per block (SGLang page size x DCP size); the worker's /server_info page size when unset. */
  blockSize: positiveInt.optional(),
});
export type WorkerDynamoConfig = z.infer<typeof workerDynamoSchema>;

export const workerConfigSchema = z.strictObject({
  id: workerId,
  /** The worker's HTTP base URL (SGLang's --host/--port). */
  url: httpUrl,
  /** ZMQ PUB endpoint of its KV events; defaults to what its /server_info advertises. */
  events: zmqEndpoint.optional(),
  /** ZMQ ROUTER replay endpoint; defaults to what its /server_info advertises. */
  replay: zmqEndpoint.optional(),
  /** Its KV events from Dynamo's event plane instead of SGLang's stream (dynamo-events.ts). */
  dynamo: workerDynamoSchema.optional(),
  /** Keys the gateway sends the worker (auth/config.ts). */
  ...workerCredentialFields,
});

export type WorkerConfig = z.output<typeof workerConfigSchema>;
