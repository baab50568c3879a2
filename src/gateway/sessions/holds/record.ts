// A session's record: the state several gateway replicas share through the session store. Hashes
// are decimal strings (int64 does not survive JSON numbers); everything else is plain JSON.
import type { RouteKind, ToolCallInfo, TurnRanges, Usage } from "../../../contract/observations.js";
import type { HoldKind } from "../../../contract/policy.js";
import type { Command } from "../../../protocol/index.js";

export interface TurnSummary {
  n: number;
  worker: string;
  route: RouteKind;
  startedMs: number;
  finishedMs: number;
  status: number;
  finishReason: string | null;
  usage: Usage;
  ranges: TurnRanges | null;
  /** Full pages of the prompt and of the whole sequence (chain[0, promptBlocks) is the prompt). */
  promptBlocks: number;
  totalBlocks: number;
  toolCalls: ToolCallInfo[];
}

export interface CommandRecord {
  /** The command's idempotency id once it was sent. */
  id: string | null;
  worker: string;
  type: Command["type"];
  reason: string;
  createdMs: number;
  /** queued -> sent -> an ack status (applied, partial, noop, duplicate, rejected, error), or failed/dropped. */
  state: string;
  ackedMs: number | null;
  detail: string | null;
}

export interface PinRecord {
  /** Why it is held (absent in records of older gateways: a marker pin). */
  kind?: HoldKind;
  /** The worker process it was taken on (absent in records of older gateways). */
  incarnation?: string | null;
  worker: string;
  blockHashes: string[];
  ttlSeconds: number | null;
  atMs: number;
}

export interface LeaseRecord {
  incarnation?: string | null;
  worker: string;
  leaseId: string;
  blockHashes: string[];
  ttlSeconds: number | null;
  atMs: number;
}

export interface SessionRecord {
  v: 1;
  id: string;
  /** The tenant that opened it (auth/ownership.ts); absent or null: opened without a tenant key. */
  tenant?: string | null;
  /** The worker the session is affine to. */
  worker: string | null;
  /** Block hashes (decimal int64) of the last turn's whole sequence in that worker's scheme. */
  chain: string[];
  /** Tokens that sequence holds (the frontier). */
  frontierTokens: number;
  turnCount: number;
  /** The latest turns, oldest first (bounded). */
  turns: TurnSummary[];
  lastActivityMs: number;
  /** What `holds` names, in the older shape (kept current with it, for readers of the record). */
  pins: PinRecord[];
  leases: LeaseRecord[];
  /** An open tool call (ToolStart acked, no ToolEnd yet). */
  tool: { worker: string; epoch: number | null; startedMs: number } | null;
  /** Every hold the gateway asked a worker for, by identity (see holds.ts); absent in older records. */
  holds?: HoldRecord[];
  /** Releases sent and not settled yet (absent in older records). */
  releases?: ReleaseRecord[];
  commands: CommandRecord[];
}

export const MAX_TURNS_KEPT = 16;

/** One hold a session record names, by its own identity (see holds.ts). */
export interface HoldRecord {
  id: string;
  kind: HoldKind;
  worker: string;
  /** The worker process the hold was taken on (a restarted worker holds none of them). */
  incarnation: string | null;
  /** Blocks held (a pin: one pin on each), and those whose release was sent and not acked yet. */
  blocks: string[];
  releasing: string[];
  /** Who sent the release still unacked, and when (a claimant that died leaves it to be sent again). */
  releasingBy?: string | null;
  releasingAt?: number | null;
  leaseId: string | null;
  /** ToolStart's session_id and the epoch its ack returned (what ToolEnd needs). */
  toolSession: string | null;
  epoch: number | null;
  /** The replica that took it (in-flight holds are reaped when it is gone). */
  replica: string;
  ttlSeconds: number | null;
  expiresMs: number | null;
  atMs: number;
  /** sending: written, no ack yet; held: acked; doubt: the ack was an error or never came. */
  state: "sending" | "held" | "doubt";
}

/**
 * A release on its way to a worker, written before it is sent: the command and the idempotency id
 * it goes out under every time. Sent again (an unknown outcome, or a claimant gone), it is the same
 * command under the same id, so a worker that applied it already answers it as a duplicate instead
 * of unpinning a second time.
 */
export interface ReleaseRecord {
  id: string;
  worker: string;
  type: "Cache" | "RevokeLease" | "ToolEnd";
  /** An unpin's blocks (empty for the others). */
  blocks: string[];
  leaseId: string | null;
  /** A RevokeLease that leaves the blocks to the worker's eviction (absent: it purges them). */
  keepBlocks?: true;
  toolSession: string | null;
  epoch: number | null;
  /** The holds it releases, and which of their blocks. */
  claims: { hold: string; blocks: string[] }[];
  /** The replica that sent it last, and when it was first sent. */
  by: string;
  atMs: number;
  /** Its ack was an error or never came: whether the worker applied it is unknown. */
  doubt: boolean;
  reason: string;
}

export function newSessionRecord(id: string, nowMs: number): SessionRecord {
  return {
    v: 1,
    id,
    worker: null,
    chain: [],
    frontierTokens: 0,
    turnCount: 0,
    turns: [],
    lastActivityMs: nowMs,
    pins: [],
    leases: [],
    tool: null,
    holds: [],
    commands: [],
  };
}

export function isSessionRecord(v: unknown): v is SessionRecord {
  const r = v as SessionRecord;
  return (
    typeof r === "object" &&
    r !== null &&
    r.v === 1 &&
    typeof r.id === "string" &&
    Array.isArray(r.chain) &&
    Array.isArray(r.turns)
  );
}
