// The turn path's view of what it serves with: the workers, the session records and the auth
// gate's tenants, as the few fields and calls it reads. Declared here, where the turn path owns
// them, and implemented by the planes (workers/worker.ts and workers/workers.ts, the session
// store, auth/gate.ts), so the turn path depends on what it reads and not on how a plane is built.
import type { TokenizeCall } from "../request/tokenize-call.js";
import type { Pool } from "undici";
import type { StoredSessionState } from "../../contract/observations.js";
import type { Gate } from "../admission.js";
import type { TenantConfig } from "../auth/config.js";
import type { SessionRecord } from "../sessions/holds/record.js";
import type { InFlightKvCounter, WorkerState } from "../workers/router.js";
import type { HashScheme } from "../workers/worker-scheme.js";

/** A worker's tokenizer, bound to the process it runs now. */
export interface TurnTokenizer {
  tokens(call: TokenizeCall): Promise<number[]>;
  prompt(call: TokenizeCall): Promise<number[]>;
  textLength(text: string): Promise<number>;
  systemLength(call: TokenizeCall, prompt: readonly number[]): Promise<number | null>;
}

/** One worker as a turn sees it: where to send the call, what it serves, its load. */
export interface TurnWorker {
  readonly id: string;
  readonly pool: Pool;
  readonly scheme: HashScheme | null;
  /** Its KV event endpoint (null: the index holds nothing of it). */
  readonly events: string | null;
  readonly healthy: boolean;
  readonly streamOutputIds: boolean;
  readonly sessionRadix: boolean;
  /** Its admission gate; null when admission is off. */
  readonly gate: Gate | null;
  readonly tokenizer: TurnTokenizer;
  /** Aborts of the calls under way on it: a call adds its own while it runs. */
  readonly calls: Set<() => void>;
  /** This gateway's calls on it and their prompt tokens: a call counts itself in and out. */
  inFlight: number;
  inFlightPromptTokens: number;
  /** The device KV of those calls' prompts, shared blocks once: a call counts its blocks in and out. */
  readonly inFlightKv: InFlightKvCounter;
  /** Its load for routing. */
  state(): WorkerState;
}

/** The workers a turn can be routed to. */
export interface TurnWorkers {
  /** Healthy, not cordoned, joined. */
  available(): readonly TurnWorker[];
  get(id: string): TurnWorker | undefined;
  /** Takes a worker that failed a call out of rotation. */
  drain(w: TurnWorker, why: string): void;
}

/** A session's record as a turn reads it: its owner, its worker, the chain it holds there. */
export interface TurnSession extends Readonly<StoredSessionState> {
  /** The tenant that opened it; absent or null: opened without a tenant key. */
  readonly tenant?: string | null;
  readonly chain: readonly string[];
  readonly lastActivityMs: number;
}

/** The session records (shared by replicas through NATS): read, and written once a turn ends. */
export interface TurnSessions {
  get(id: string): Promise<TurnSession | null>;
  update(id: string, change: (r: SessionRecord) => void): Promise<SessionRecord>;
}

/** The auth gate as the routes behind it use it: the tenants, and a refusal to count. */
export interface TurnAuth {
  readonly auth: { readonly tenants: ReadonlyMap<string, TenantConfig> };
  /** Counts a request refused for naming a session of another tenant. */
  count(reason: "other_tenant"): void;
}
