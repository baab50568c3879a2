// Metrics of the gateway's operational doors: the listener's cuts and caps, admission refusals,
// drain, and the latency histograms an operator reads first (time to first token, between tokens,
// end to end). On the gateway's registry, next to metrics.ts's.
import { Counter, Gauge, type Registry } from "prom-client";
import { HotHistogram } from "./hot-metrics.js";

// From a cached prefix on a small model to a long generation on a loaded worker.
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const TOKEN_GAP_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5, 5,
];

function latencyHistogram(
  registers: Registry[],
  name: string,
  help: string,
  buckets: number[],
): HotHistogram<"route" | "worker" | "tenant"> {
  return new HotHistogram({
    name,
    help,
    labelNames: ["route", "worker", "tenant"] as const,
    buckets,
    registers,
  });
}

export class OpsMetrics {
  readonly listenerCuts: Counter<"reason">;
  readonly connectionsRefused: Counter;
  readonly connectionsOpen: Gauge;
  readonly admissionRefused: Counter<"worker" | "reason" | "tenant">;
  readonly drainRefused: Counter<"route">;
  readonly draining: Gauge;
  readonly membership: Counter<"change">;
  readonly kvEventsRefused: Counter<"worker">;
  readonly ttft: HotHistogram<"route" | "worker" | "tenant">;
  readonly tokenGap: HotHistogram<"route" | "worker" | "tenant">;
  readonly e2e: HotHistogram<"route" | "worker" | "tenant">;

  constructor(registry: Registry) {
    const registers = [registry];
    const counter = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
      new Counter<L>({ name, help, labelNames, registers });
    const gauge = (name: string, help: string) => new Gauge({ name, help, registers });
    this.listenerCuts = counter(
      "kvctl_gateway_listener_cuts_total",
      "Client connections the listener cut, by reason (request_timeout: headers or body not received within their deadline, answered 408; parse_error; reset)",
      ["reason"],
    );
    this.connectionsRefused = counter(
      "kvctl_gateway_connections_refused_total",
      "Client connections closed at once because listener.maxConnections were open",
    );
    this.connectionsOpen = gauge("kvctl_gateway_connections_open", "Client connections open");
    this.admissionRefused = counter(
      "kvctl_gateway_admission_refused_total",
      "Requests refused at admission: queue_full (429) or deadline (503, waited past admission.queueTimeoutMs)",
      ["worker", "reason", "tenant"],
    );
    this.drainRefused = counter(
      "kvctl_gateway_drain_refused_total",
      "Requests answered 503 because the gateway was draining",
      ["route"],
    );
    this.draining = gauge(
      "kvctl_gateway_draining",
      "1 while the gateway drains (not ready; new requests get 503)",
    );
    this.membership = counter(
      "kvctl_gateway_membership_changes_total",
      "Workers added, drained, undrained, removed (admin API or config file) and joined (came up after start)",
      ["change"],
    );
    this.kvEventsRefused = counter(
      "kvctl_gateway_kv_events_refused_total",
      "KV-event messages ZMQ refused unread (over the size cap, or bad framing); each drops and re-opens the connection",
      ["worker"],
    );
    const latency = (name: string, help: string, buckets: number[]) =>
      latencyHistogram(registers, name, help, buckets);
    this.ttft = latency(
      "kvctl_gateway_time_to_first_token_seconds",
      "Streamed requests: time from the request to the first answer chunk",
      LATENCY_BUCKETS,
    );
    this.tokenGap = latency(
      "kvctl_gateway_inter_token_latency_seconds",
      "Streamed requests: time between two answer chunks",
      TOKEN_GAP_BUCKETS,
    );
    this.e2e = latency(
      "kvctl_gateway_e2e_latency_seconds",
      "Time from the request to the end of its answer, by route, worker and tenant",
      LATENCY_BUCKETS,
    );
  }
}
