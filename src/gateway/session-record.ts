// A session's record: the state several gateway replicas share through the session store. Hashes
// are decimal strings (int64 does not survive JSON numbers); everything else is plain JSON.
import type { Ack, Command } from "../protocol/index.js";
import type { RouteKind, ToolCallInfo, TurnRanges, Usage } from "../contract/observations.js";

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
  worker: string;
  blockHashes: string[];
  ttlSeconds: number | null;
  atMs: number;
}

export interface LeaseRecord {
  worker: string;
  leaseId: string;
  blockHashes: string[];
  ttlSeconds: number | null;
  atMs: number;
}

export interface SessionRecord {
  v: 1;
  id: string;
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
  pins: PinRecord[];
  leases: LeaseRecord[];
  /** An open tool call (ToolStart acked, no ToolEnd yet). */
  tool: { worker: string; epoch: number | null; startedMs: number } | null;
  commands: CommandRecord[];
}

export const MAX_TURNS_KEPT = 16;

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
    commands: [],
  };
}

/** Folds an acked command into the pins, leases and tool state it changes. */
export function applyAckToRecord(r: SessionRecord, worker: string, cmd: Command, ack: Ack, nowMs: number): void {
  // A lease the worker no longer knows (expired, or the worker restarted) is gone from the record too.
  if (cmd.type === "RenewLease" && ack.status === "rejected") r.leases = r.leases.filter((l) => l.leaseId !== cmd.lease_id);
  if (ack.status !== "applied" && ack.status !== "partial" && ack.status !== "duplicate") return;
  switch (cmd.type) {
    case "Cache": {
      const hashes = cmd.block_hashes.map(String);
      if (cmd.pin) r.pins.push({ worker, blockHashes: hashes, ttlSeconds: cmd.ttl_seconds ?? null, atMs: nowMs });
      else {
        const drop = new Set(hashes);
        r.pins = r.pins.filter((p) => p.worker !== worker || !p.blockHashes.some((h) => drop.has(h)));
      }
      break;
    }
    case "Pause":
      r.leases = r.leases.filter((l) => l.leaseId !== cmd.lease_id);
      r.leases.push({ worker, leaseId: cmd.lease_id, blockHashes: cmd.block_hashes.map(String), ttlSeconds: cmd.ttl_seconds, atMs: nowMs });
      break;
    case "RenewLease":
      for (const l of r.leases) if (l.leaseId === cmd.lease_id) {
        l.ttlSeconds = cmd.new_ttl_seconds;
        l.atMs = nowMs;
      }
      break;
    case "RevokeLease":
      r.leases = r.leases.filter((l) => l.leaseId !== cmd.lease_id);
      break;
    case "ToolStart": {
      r.tool = { worker, epoch: ack.epoch === null ? null : Number(ack.epoch), startedMs: nowMs };
      break;
    }
    case "ToolEnd":
      r.tool = null;
      break;
    default:
      break;
  }
}

export function isSessionRecord(v: unknown): v is SessionRecord {
  const r = v as SessionRecord;
  return typeof r === "object" && r !== null && r.v === 1 && typeof r.id === "string" && Array.isArray(r.chain) && Array.isArray(r.turns);
}
