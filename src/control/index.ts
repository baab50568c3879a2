// Public API of the control plane: the NATS publisher, connection options, errors, counters, and
// the reference responder (a test stand-in for the worker, not the worker).
export { backoffDelay } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export { connectControlPlane, natsOptions } from "./connection.js";
export type { ControlConnectOptions, NatsAuthOptions, NatsTlsOptions } from "./connection.js";
export { newCounters } from "./counters.js";
export type { ControlCounters } from "./counters.js";
export { AckTimeoutError, ControlError, DeliveryError, InvalidAckError, NoRespondersError, WindowFullError } from "./errors.js";
export { InFlightWindow } from "./in-flight-window.js";
export { ControlPublisher } from "./publisher.js";
export { ReplyMux } from "./reply-mux.js";
export type { BroadcastOptions, BroadcastResult, PublisherOptions, PublishTarget, SendOptions } from "./publisher.js";
export { ReferenceResponder } from "./reference-responder.js";
export type { ReferenceResponderOptions, ResponderStats } from "./reference-responder.js";
export { ReferenceWorkerModel } from "./reference-worker-model.js";
export type { ReferenceModelOptions } from "./reference-worker-model.js";
export { connectOptionsFromFlags, joinNegativeValues, NATS_FLAGS, NATS_FLAGS_HELP } from "./connection-flags.js";
