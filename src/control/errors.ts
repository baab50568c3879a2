// Why a command did not get an ack. Each failure has its own class so callers can tell "nobody is
// subscribed" (worker down or wrong id: retrying soon rarely helps) from "nobody answered in time"
// (worker busy or partitioned: the command may still have been applied, the id makes a retry safe).

export class ControlError extends Error {
  constructor(
    message: string,
    /** Idempotency id of the command (the same across retries). */
    readonly id: string | null,
    /** Worker addressed, or null for a broadcast. */
    readonly workerId: string | null,
    /** How many times the command was put on the wire. */
    readonly attempts: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server reported no subscriber on the subject (NATS 503), after every retry. */
export class NoRespondersError extends ControlError {}

/** A subscriber may exist but no ack came back before the timeout, after every retry. */
export class AckTimeoutError extends ControlError {}

/** The in-flight window and its wait queue are both full: refused before sending. */
export class WindowFullError extends ControlError {}

/** Something answered, but not with a valid Ack for this command. */
export class InvalidAckError extends ControlError {}

/** The connection is closed or failed for another reason: the command was not delivered. */
export class DeliveryError extends ControlError {}
