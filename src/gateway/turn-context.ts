// What every part of serving a turn shares: configuration, workers, index, sessions, metrics,
// clock and the observation sink.
import type { KvIndex } from "../index/index.js";
import type { GatewayConfig } from "./config.js";
import type { ApiFlavor } from "./errors.js";
import type { GatewayMetrics } from "./metrics.js";
import type { Observation, RouteKind } from "./observations.js";
import type { Clock, SessionStore } from "./session-store.js";
import type { WorkerSet } from "./workers.js";

export interface ParsedBody {
  raw: Buffer;
  json: unknown;
}

export interface TurnContext {
  config: GatewayConfig;
  workers: WorkerSet;
  index: KvIndex;
  sessions: SessionStore;
  metrics: GatewayMetrics;
  clock: Clock;
  observe: (o: Observation) => void;
  decisionLog: ((line: string) => void) | null;
  log: (line: string) => void;
  rand: () => number;
  nextRequestId: () => string;
  /** Turns of a session still being recorded on this replica; its next turn waits for them. */
  recording: Map<string, Promise<void>>;
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function flavorOf(route: RouteKind): ApiFlavor {
  return route === "messages" ? "anthropic" : "openai";
}
