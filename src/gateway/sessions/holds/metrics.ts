// Counters of the hold ledger and the worker reconciliation (registered on the gateway's registry).
import { Counter, type Registry } from "prom-client";

export class HoldMetrics {
  readonly dropped: Counter<"kind" | "why">;
  readonly releasesSkipped: Counter<"type">;
  readonly replicasReaped: Counter;
  readonly badRecords: Counter<"why">;
  readonly divergences: Counter<"worker" | "kind">;
  readonly workerRestarts: Counter<"worker">;
  readonly expired: Counter;
  readonly unsure: Counter<"type" | "status">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.dropped = new Counter({
      name: "kvctl_gateway_holds_dropped_total",
      help: "Holds dropped from session records without a release (expired, or their worker restarted)",
      labelNames: ["kind", "why"],
      registers,
    });
    this.releasesSkipped = new Counter({
      name: "kvctl_gateway_hold_releases_skipped_total",
      help: "Releases not sent: no hold the record names was left to release",
      labelNames: ["type"],
      registers,
    });
    this.replicasReaped = new Counter({
      name: "kvctl_gateway_replicas_reaped_total",
      help: "Replicas found gone (heartbeat silent) whose in-flight holds this replica released",
      registers,
    });
    this.badRecords = new Counter({
      name: "kvctl_gateway_bad_records_total",
      help: "Session records another gateway version wrote, or whose update kept losing, by why",
      labelNames: ["why"],
      registers,
    });
    this.divergences = new Counter({
      name: "kvctl_gateway_pin_divergences_total",
      help: "Blocks where a worker's Inspect and the budget view disagreed (repaired to the worker's)",
      labelNames: ["worker", "kind"],
      registers,
    });
    this.workerRestarts = new Counter({
      name: "kvctl_gateway_worker_restarts_total",
      help: "Worker processes found replaced (Inspect shows a new incarnation, or the KV-event sequence started over)",
      labelNames: ["worker"],
      registers,
    });
    this.unsure = new Counter({
      name: "kvctl_gateway_hold_acks_unsure_total",
      help: "Hold commands acked partial (the hold narrowed to what the worker did) or error / not answered (the hold kept in doubt until close or expiry)",
      labelNames: ["type", "status"],
      registers,
    });
    this.expired = new Counter({
      name: "kvctl_gateway_sessions_expired_total",
      help: "Sessions whose record was about to expire and whose holds this replica released",
      registers,
    });
  }
}
