// The gateway's Prometheus metrics, on a registry of its own (two gateways in one process, as in
// the tests, must not share counters).
import { Counter, Gauge, Registry } from "prom-client";
import { HotCounter, HotHistogram } from "./hot-metrics.js";
import type { CommandCounts, SessionStoreCounts, TurnCounts } from "./metric-parts.js";
import { OpsMetrics } from "./ops-metrics.js";

export class GatewayMetrics implements TurnCounts, CommandCounts, SessionStoreCounts {
  readonly registry = new Registry();
  /** The operational doors' metrics (ops-metrics.ts). */
  readonly ops = new OpsMetrics(this.registry);
  readonly requests = new HotCounter({
    name: "kvctl_gateway_requests_total",
    help: "Requests answered, by route, worker and HTTP status",
    labelNames: ["route", "worker", "status"] as const,
    registers: [this.registry],
  });
  readonly duration = new HotHistogram({
    name: "kvctl_gateway_request_duration_seconds",
    help: "Time from request to the end of the response, by route",
    labelNames: ["route"] as const,
    buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly decisions = new HotCounter({
    name: "kvctl_gateway_routing_decisions_total",
    help: "Routing decisions by chosen worker and reason",
    labelNames: ["worker", "reason"] as const,
    registers: [this.registry],
  });
  readonly cachedTokens = new HotCounter({
    name: "kvctl_gateway_cache_hit_tokens_total",
    help: "Prompt tokens the worker served from its prefix cache (usage.prompt_tokens_details.cached_tokens)",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly promptTokens = new HotCounter({
    name: "kvctl_gateway_prompt_tokens_total",
    help: "Prompt tokens the worker reported (usage.prompt_tokens)",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly sessionsActive = new Gauge({
    name: "kvctl_gateway_sessions_active",
    help: "Sessions this replica saw a turn of within the idle window",
    registers: [this.registry],
  });
  readonly commandsSent = new Counter({
    name: "kvctl_gateway_commands_sent_total",
    help: "Policy commands sent to workers, by command type",
    labelNames: ["type"] as const,
    registers: [this.registry],
  });
  readonly commandsAcked = new Counter({
    name: "kvctl_gateway_commands_acked_total",
    help: "Acks received for policy commands, by command type and ack status",
    labelNames: ["type", "status"] as const,
    registers: [this.registry],
  });
  readonly commandsFailed = new Counter({
    name: "kvctl_gateway_commands_failed_total",
    help: "Policy commands that got no ack (timeout, no responders, invalid), by type and error",
    labelNames: ["type", "error"] as const,
    registers: [this.registry],
  });
  readonly commandsDropped = new Counter({
    name: "kvctl_gateway_commands_dropped_total",
    help: "Policy commands dropped before sending (queue full while NATS is down, invalid command)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly commandsQueued = new Gauge({
    name: "kvctl_gateway_commands_queued",
    help: "Policy commands waiting for NATS",
    registers: [this.registry],
  });
  readonly natsConnected = new Gauge({
    name: "kvctl_gateway_nats_connected",
    help: "1 while the NATS connection is up (0 when down or not configured)",
    registers: [this.registry],
  });
  readonly workerHealthy = new Gauge({
    name: "kvctl_gateway_worker_healthy",
    help: "1 while the worker passes health checks and takes traffic, 0 while drained",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly workerStale = new Gauge({
    name: "kvctl_gateway_worker_index_stale",
    help: "1 while the worker's KV-event stream has a gap not yet replayed (its index view is not used)",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly zmqEvents = new Counter({
    name: "kvctl_gateway_kv_event_batches_total",
    help: "KV-event batches received per worker",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly zmqGaps = new Counter({
    name: "kvctl_gateway_kv_event_gaps_total",
    help: "Gaps seen in a worker's KV-event sequence",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly inFlight = new Gauge({
    name: "kvctl_gateway_in_flight_requests",
    help: "Requests in flight per worker",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly admissionWaiting = new Gauge({
    name: "kvctl_gateway_admission_waiting_requests",
    help: "Requests routed to a worker and waiting at the gateway for room there (admission limits)",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly admissionQueued = new Counter({
    name: "kvctl_gateway_admission_queued_total",
    help: "Requests that waited at the gateway for room on their worker",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly admissionWaitSeconds = new Counter({
    name: "kvctl_gateway_admission_wait_seconds_total",
    help: "Seconds requests waited at the gateway for room on their worker",
    labelNames: ["worker"] as const,
    registers: [this.registry],
  });
  readonly upstreamErrors = new Counter({
    name: "kvctl_gateway_upstream_errors_total",
    help: "Worker failures seen while serving a request, by kind (timeout, connect, reset, http)",
    labelNames: ["worker", "kind"] as const,
    registers: [this.registry],
  });
  readonly badRequests = new Counter({
    name: "kvctl_gateway_bad_requests_total",
    help: "Requests refused before routing, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly clientAborts = new Counter({
    name: "kvctl_gateway_client_aborts_total",
    help: "Requests whose client went away before the response ended (the worker request is aborted)",
    labelNames: ["route"] as const,
    registers: [this.registry],
  });
  readonly sessionStoreErrors = new Counter({
    name: "kvctl_gateway_session_store_errors_total",
    help: "Session KV operations that failed or were skipped (NATS down), by operation",
    labelNames: ["op"] as const,
    registers: [this.registry],
  });
  readonly hints = new Counter({
    name: "kvctl_gateway_hints_total",
    help: "Explicit session hints (events route and x-kvctl-hint header), by event and outcome",
    labelNames: ["event", "outcome"] as const,
    registers: [this.registry],
  });
  /** One answered request (kvctl_gateway_requests_total). */
  countRequest(route: string, worker: string, status: number): void {
    this.requests.inc({ route, worker, status });
  }
}
