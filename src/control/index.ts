// Public API of the control plane: the NATS publisher, connection options, errors and counters.
// Test doubles (the reference responder, a nats-server launcher) are in kvctl/testing.
export { connectControlPlane, natsOptions } from "./connection.js";
export type { ControlConnectOptions, NatsAuthOptions, NatsTlsOptions } from "./connection.js";
export { newCounters } from "./counters.js";
export type { ControlCounters } from "./counters.js";
export {
  AckTimeoutError,
  ControlError,
  DeliveryError,
  InvalidAckError,
  NoRespondersError,
  WindowFullError,
} from "./errors.js";
export { ControlPublisher } from "./publisher.js";
export type {
  BroadcastOptions,
  BroadcastResult,
  PublisherOptions,
  PublishTarget,
  SendOptions,
} from "./publisher.js";
