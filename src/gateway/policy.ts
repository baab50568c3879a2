// The decision hook: a policy turns observations into commands. Policies are pure (no I/O, time
// from the observation): the gateway sends what they return through the control publisher and
// records each command with its reason and ack. Real policies live with the next layer; this
// file holds the interface and the two that ship with the gateway.
import type { Command } from "../protocol/index.js";
import type { Observation } from "./observations.js";

export interface PolicyCommand {
  /** A worker id, or "broadcast" for every worker. */
  worker: string;
  command: Command;
  /** Why, in a few words (metrics label and log line). */
  reason: string;
  /** The session the command is for, so its record keeps the command and ack. */
  sessionId?: string | null;
}

export interface GatewayPolicy {
  readonly name: string;
  observe(o: Observation): readonly PolicyCommand[];
}

/** Sends nothing. */
export const noopPolicy: GatewayPolicy = {
  name: "noop",
  observe: () => [],
};

/** Sends nothing; writes one JSON line per observation (bigints as decimal strings). */
export function loggingPolicy(write: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): GatewayPolicy {
  return {
    name: "log",
    observe(o) {
      write(JSON.stringify({ policy: "log", ...o }, (_k, v) => (typeof v === "bigint" ? v.toString() : v)));
      return [];
    },
  };
}
