// One worker as the gateway knows it: its HTTP pool (with the keys the gateway sends it), hash
// scheme, event endpoints, health, load, admission gate, features and tokenizer. The set of
// workers and their membership are workers.ts.
import type { Pool } from "undici";
import type { KvEventConsumer } from "../../events/consumer.js";
import type { ProgramRetention } from "../../contract/policy.js";
import type { Gate } from "../admission.js";
import { admissionGate } from "../admission-mode.js";
import { resolveWorkerCredentials } from "../auth/upstream-credentials.js";
import type { GatewayConfig } from "../config/schema.js";
import type { WorkerConfig } from "../config/workers.js";
import { InFlightKv } from "./in-flight-kv.js";
import type { WorkerState } from "./router.js";
import { Tokenizer } from "./tokenizer.js";
import { createUpstreamPool } from "./upstream-pool.js";
import type { HashScheme } from "./worker-scheme.js";

/**
 * How long a worker may take over a call that renders or tokenizes a whole prompt (a tokenize,
 * its /server_info probe): five health timeouts, as a busy worker's tokenizer runs between batches.
 */
export function tokenizeTimeoutMs(cfg: GatewayConfig): number {
  return cfg.health.timeoutMs * 5;
}

export class GatewayWorker {
  readonly id: string;
  readonly url: string;
  readonly pool: Pool;
  scheme: HashScheme | null = null;
  events: string | null;
  replay: string | null;
  topic = "";
  consumer: KvEventConsumer | null = null;
  /** Dynamo's event plane for this worker, when configured (its KV events come from there). */
  readonly dynamo: WorkerConfig["dynamo"] | null;
  dynamoEvents: { close(): Promise<void> } | null = null;
  /** Takes traffic (passed health; not drained). */
  healthy = true;
  /** Probed and subscribed: a worker that did not answer yet is probed again by the health checks. */
  joined = false;
  /** Drained by an operator: takes no new traffic whatever its health, until undrained. */
  cordoned = false;
  /** The join under way, if any. */
  joining: Promise<boolean> | null = null;
  stale = false;
  failures = 0;
  inFlight = 0;
  inFlightPromptTokens = 0;
  /** The device KV of this gateway's prompts in flight on it (shared blocks once), for routing. */
  readonly inFlightKv = new InFlightKv();
  /** What the worker itself last reported (/v1/loads): requests running or waiting, from every gateway. */
  reported: { requests: number; waitingTokens: number } | null = null;
  /** Cleared when the worker has no /v1/loads. */
  loadsEndpoint = true;
  /** Aborts of the calls under way on it (cut when a health drain outlasts its grace, on a refused
   * connection, or when the worker is removed). */
  readonly calls = new Set<() => void>();
  /** When health drained it (ms, the gateway's clock); null while it passes or its calls were cut. */
  drainedAt: number | null = null;
  /** It serves kvctl's /kvctl/v1/messages/tokenize (probed at start; see worker-features.ts). */
  messagesTokenize = true;
  /** It returns output ids on chat streams when asked (from its /server_info version; see worker-features.ts). */
  streamOutputIds = false;
  /** It runs SGLang's session radix cache: session turns carry their id in the body (radix-sessions.ts). */
  sessionRadix = false;
  /** Its device KV pool in tokens (its /server_info max_total_num_tokens), when it says. */
  deviceTokens: number | undefined = undefined;
  /** Requests this gateway runs on the worker at once (the rest wait here); null: no limit. */
  readonly gate: Gate | null;
  /** Its tokenizer, bound to the process it runs now (newProcess() replaces it). */
  tokenizer: Tokenizer;

  constructor(
    c: WorkerConfig,
    cfg: GatewayConfig,
    retention: RetentionFor | null = null,
    programReleased: ProgramReleased | null = null,
  ) {
    this.id = c.id;
    this.url = c.url.replace(/\/$/, "");
    this.gate = admissionGate(
      cfg.admission,
      retention?.(c.id, () => this.scheme?.pageSize ?? 1) ?? null,
      programReleased ? (program, why) => programReleased(this, program, why) : null,
    );
    this.events = c.events ?? null;
    this.replay = c.replay ?? null;
    this.dynamo = c.dynamo ?? null;
    // Dynamo relays SGLang's own block hashes: SGLang's chain at the configured block size.
    if (c.dynamo?.blockSize)
      this.scheme = { pageSize: c.dynamo.blockSize, eventFormat: "sglang", bigram: false };
    this.pool = createUpstreamPool(
      this.url,
      {
        connections: cfg.limits.connectionsPerWorker,
        connectTimeoutMs: cfg.limits.upstreamConnectTimeoutMs,
        headersTimeoutMs: cfg.limits.upstreamHeadersTimeoutMs,
        bodyTimeoutMs: cfg.limits.upstreamIdleTimeoutMs,
      },
      resolveWorkerCredentials(c, cfg.auth !== undefined),
    );
    this.tokenizer = new Tokenizer(this, tokenizeTimeoutMs(cfg));
  }

  /** The worker runs a new process: nothing remembered of the old one's tokenizer is kept. */
  newProcess(): void {
    this.tokenizer = new Tokenizer(this, this.tokenizer.timeoutMs);
  }

  /** Load for routing: what this gateway has in flight, or the worker's own count when higher
   * (other replicas' traffic). */
  state(): WorkerState {
    const r = this.reported;
    return {
      id: this.id,
      inFlight: r ? Math.max(this.inFlight, r.requests) : this.inFlight,
      inFlightPromptTokens: r
        ? Math.max(this.inFlightPromptTokens, r.waitingTokens)
        : this.inFlightPromptTokens,
      stale: this.stale,
      pageSize: this.scheme?.pageSize ?? 1,
      deviceTokens: this.deviceTokens,
      inFlightKv: this.inFlightKv,
    };
  }
}

export type ProgramReleased = (
  worker: GatewayWorker,
  program: string,
  why: "let_go" | "pressure",
) => void;

export type RetentionFor = (worker: string, pageSize: () => number) => ProgramRetention;
