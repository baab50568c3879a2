// What the turn path serves with: the parts of the configuration it reads, the workers, the index,
// the sessions, the policy's inlet (where it reports is telemetry.ts). Built once, read-only, by
// createGateway; the workers, sessions and auth are the planes seen through ports.ts.
import type { Observation } from "../../contract/observations.js";
import type { PoliciesConfig } from "../../contract/policies-config.js";
import type { KvIndex } from "../../index/index.js";
import type { AdmissionConfig } from "../config/admission.js";
import type { LimitsConfig } from "../config/limits.js";
import type { RoutingConfig } from "../config/routing.js";
import type { TurnAuth, TurnSessions, TurnWorkers } from "./ports.js";

/** The configuration the turn path reads. */
export interface TurnConfig {
  readonly routing: RoutingConfig;
  readonly limits: LimitsConfig;
  readonly admission: AdmissionConfig;
  readonly policies?: PoliciesConfig | undefined;
}

export interface TurnDeps {
  readonly config: TurnConfig;
  readonly workers: TurnWorkers;
  readonly index: KvIndex;
  readonly sessions: TurnSessions;
  /** Client keys and tenants; null when auth is not configured. */
  readonly auth: TurnAuth | null;
  /** The policy's inlet: each observation goes to it, and its commands along the command path. */
  readonly observe: (o: Observation) => void;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  readonly recording: Map<string, Promise<void>>;
  readonly rand: () => number;
}
