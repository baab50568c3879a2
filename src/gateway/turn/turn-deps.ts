// What the turn path serves with: configuration, the workers, the index, the sessions, the
// policy's inlet (where it reports is telemetry.ts). Built once, read-only, by createGateway.
import type { Observation } from "../../contract/observations.js";
import type { KvIndex } from "../../index/index.js";
import type { AuthGate } from "../auth/gate.js";
import type { GatewayConfig } from "../config/schema.js";
import type { SessionStore } from "../sessions/session-store.js";
import type { WorkerSet } from "../workers/workers.js";

export interface TurnDeps {
  readonly config: GatewayConfig;
  readonly workers: WorkerSet;
  readonly index: KvIndex;
  readonly sessions: SessionStore;
  /** Client keys, tenants and the admin key; null when auth is not configured. */
  readonly auth: AuthGate | null;
  /** The policy's inlet: each observation goes to it, and its commands along the command path. */
  readonly observe: (o: Observation) => void;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  readonly recording: Map<string, Promise<void>>;
  readonly rand: () => number;
}
