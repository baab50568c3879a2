// The decision hook between the gateway and a policy: a policy turns observations into commands.
// Policies are pure (no I/O, time from the observation): the gateway sends what they return
// through the control publisher and records each command with its reason and ack. The gateway
// receives its policy (an object, or a factory it calls once with what a policy may share);
// it never builds one of the agent policies itself.
import type { Registry } from "prom-client";
import type { Command } from "../protocol/index.js";
import type { PoliciesConfig } from "./policies-config.js";
import type { Observation } from "./observations.js";

export interface PolicyCommand {
  /** A worker id, or "broadcast" for every worker. */
  worker: string;
  command: Command;
  /** Why, in a few words (metrics label and log line). */
  reason: string;
  /** The session the command is for, so its record keeps the command and ack. */
  sessionId?: string | null;
  /** What kind of hold a pin takes or releases (the session record names each hold by it). */
  hold?: HoldKind;
  /**
   * Its name: given when the policy's transaction emits it (the gateway names a command that comes
   * without one). It is the idempotency id the command goes out under, and what its ack, the hold
   * it takes or releases and its entry in the session record are found by; a command the gateway
   * trims (a tenant's pin cap) or narrows (an unpin of holds already released) keeps it, and its
   * ack carries the command as sent.
   */
  id?: string;
}

/** The kinds of hold a session record names, each by its own identity. */
export type HoldKind = "marker" | "inflight" | "tool" | "lease" | "offload";

export interface GatewayPolicy {
  readonly name: string;
  observe(o: Observation): readonly PolicyCommand[];
  /**
   * Program admission's retention for one worker (`admission.mode: program`), if the policy decides it.
   * `prefetch`: the gateway's Prefetch to that worker (a chain's blocks back to its device), when it can send one.
   */
  programRetention?(
    worker: string,
    pageSize: () => number,
    prefetch?: SendPrefetch,
  ): ProgramRetention;
}

/** What a worker's Prefetch ack says of the blocks asked for (failed: refused, an error, or no answer). */
export type PrefetchOutcome = "resident" | "partial" | "failed";
/** Sends a Prefetch of `blocks` (a chain, first block first) to one worker. */
export type SendPrefetch = (blocks: readonly bigint[]) => Promise<PrefetchOutcome>;

/** What a program's KV and slot do while its tool runs, and what became of that. */
export interface ProgramRetention {
  /** At a tool boundary: keep (slot and KV for ttlSeconds), park (KV on host, slot freed) or let go. */
  decide(
    id: string,
    tokens: number,
    tools: readonly (string | null)[],
  ): { action: "keep" | "park" | "let_go"; ttlSeconds: number };
  /** The hold chosen ended before the program came back: its TTL or lease ran out, or pressure took a kept slot. */
  lapsed(id: string, why: "ttl" | "lease" | "pressure"): void;
  /** A request of the program came: the gap its last decision opened, if any, ended. */
  returned(id: string): void;
  /** Brings a parked program's blocks back to the device; resolves with what the worker said. */
  prefetch?(id: string): Promise<PrefetchOutcome>;
  /** How a prefetch ended for the admission that waited on it (timeout: admitted at the deadline). */
  prefetched?(id: string, outcome: PrefetchOutcome | "timeout"): void;
}

/** What the gateway hands a policy factory: its settings and the gateway's shared outlets. */
export interface PolicyEnv {
  /** The `policies` section of the gateway config (validated), when present. */
  config: PoliciesConfig | undefined;
  /** The gateway's metrics registry (one /metrics). */
  registry: Registry;
  /** Operational log lines. */
  log: (line: string) => void;
  /** The --json-log decision sink, or null when it is off. */
  decisionLog: ((line: string) => void) | null;
  /** A tenant's pin caps (blocks per session, per tenant), null when it has none; unset: auth off. */
  tenantCaps?: (tenant: string) => TenantPinCaps | null;
}

/** Pinned blocks one session of a tenant, and all its sessions together, may hold (null: no cap). */
export interface TenantPinCaps {
  perSession: number | null;
  perTenant: number | null;
}

/** Builds a policy once the gateway's registry and logs exist. */
export type PolicyFactory = (env: PolicyEnv) => GatewayPolicy;
