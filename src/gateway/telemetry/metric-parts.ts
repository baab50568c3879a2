// The gateway's metrics as each concern counts them: a module that only counts its own takes its
// part, not the whole registry (metrics.ts, whose GatewayMetrics implements every part).
import type { Counter, Gauge } from "prom-client";

/** What a turn counts: requests by outcome, worker failures, client aborts, hints, refusals. */
export interface TurnCounts {
  /** One answered request (kvctl_gateway_requests_total). */
  countRequest(route: string, worker: string, status: number): void;
  readonly upstreamErrors: Counter<"worker" | "kind">;
  readonly clientAborts: Counter<"route">;
  readonly hints: Counter<"event" | "outcome">;
  readonly ops: { readonly admissionRefused: Counter<"worker" | "reason" | "tenant"> };
}

/** The policy commands sent to workers and what came of them. */
export interface CommandCounts {
  readonly commandsSent: Counter<"type">;
  readonly commandsAcked: Counter<"type" | "status">;
  readonly commandsFailed: Counter<"type" | "error">;
  readonly commandsDropped: Counter<"reason">;
  readonly commandsQueued: Gauge;
}

/** Session KV operations that failed or were skipped. */
export interface SessionStoreCounts {
  readonly sessionStoreErrors: Counter<"op">;
}
