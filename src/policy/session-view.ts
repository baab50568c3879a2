// What the policy knows of one session, as the rules read it: immutable. A rule never changes a
// view; it records a patch on its transaction (tx.ts), and the policy applies it, replacing the view.
import { createHash } from "node:crypto";
import type { CommandAcked } from "../contract/observations.js";
import { ID_PATTERN } from "../protocol/fields.js";
import { MAX_ID_LENGTH } from "../protocol/limits.js";

export interface ToolWait {
  /** none: the budget had no room, nothing is held; the wait is still timed and closed. */
  readonly mode: "keep" | "offload" | "none";
  readonly worker: string;
  readonly names: readonly (string | null)[];
  readonly callIds: readonly string[];
  readonly startedAt: number;
  readonly predictedSeconds: number;
  readonly blocks: readonly bigint[];
  /** ToolStart's epoch once acked (offload). */
  readonly epoch: number | null;
  /** The tool returned before ToolStart's ack brought the epoch: ToolEnd goes out when it does. */
  readonly ending?: string;
}

export interface LeaseView {
  readonly id: string;
  readonly worker: string;
  readonly blocks: readonly bigint[];
  /** Adopted from the session store, not yet renewed by this replica. */
  readonly restored: boolean;
}

export interface SessionView {
  readonly id: string;
  readonly worker: string | null;
  /** The last turn's whole sequence (prompt + output full pages) on `worker`. */
  readonly chain: readonly bigint[];
  /** How many of `chain`'s blocks a later turn can reuse: all of them, or those before this turn's
   * reasoning when the think rule marks it transient (the blocks after it are dead with it). */
  readonly reusableBlocks: number;
  readonly promptBlocks: number;
  /** Blocks up to the client's furthest cache marker: a prefix meant for reuse, which the session's end leaves. */
  readonly markerBlocks: number;
  /** The sequence before the last turn (what a rewrite diverged from), and its worker. */
  readonly prevChain: readonly bigint[];
  readonly prevPromptBlocks: number;
  readonly prevWorker: string | null;
  readonly inFlight: boolean;
  readonly lastActivity: number;
  readonly lease: LeaseView | null;
  readonly leaseSeq: number;
  /** Demoted to host under a lease (idle or pressure) and not back yet. */
  readonly paused: boolean;
  readonly tool: ToolWait | null;
  /** Reasoning blocks waiting for the next user turn to be purged. */
  readonly reasoning: readonly { readonly worker: string; readonly blocks: readonly bigint[] }[];
  /** The tenant that owns the session (its first turn's), null without auth. */
  readonly tenant: string | null;
}

/** The blocks of the session's last chain a later turn can reuse (what a hold should cover). */
export function reusableChain(s: SessionView): bigint[] {
  return s.chain.slice(0, s.reusableBlocks);
}

export function newSessionView(id: string, now: number): SessionView {
  return Object.freeze({
    id,
    worker: null,
    chain: [],
    reusableBlocks: 0,
    promptBlocks: 0,
    markerBlocks: 0,
    prevChain: [],
    prevPromptBlocks: 0,
    prevWorker: null,
    inFlight: false,
    lastActivity: now,
    lease: null,
    leaseSeq: 0,
    paused: false,
    tool: null,
    reasoning: [],
    tenant: null,
  });
}

/** A view with `patch` applied: a new frozen object, and so are the lease and tool wait it brings.
 * Its arrays stay as they came (a chain is the observation's; their types are read-only). */
export function patched(s: SessionView, patch: Partial<SessionView>): SessionView {
  for (const v of [patch.lease, patch.tool]) if (v) Object.freeze(v);
  return Object.freeze({ ...s, ...patch });
}

export const SAFE_ID = (id: string): string =>
  ID_PATTERN.test(id) && id.length <= MAX_ID_LENGTH - 8
    ? id
    : `sha-${createHash("sha256").update(id).digest("hex").slice(0, 40)}`;

/**
 * A pin command as it was sent, against the blocks the rule emitted: `sent`, the blocks the ack's
 * command carries, and `cut`, those a gateway left out (a tenant's pin cap trimmed it). The worker
 * never saw the cut ones: they are not held.
 */
export function sentPart(
  emitted: readonly bigint[],
  a: CommandAcked,
): { sent: readonly bigint[]; cut: bigint[] } {
  const c = a.command;
  if (c?.type !== "Cache" || c.block_hashes.length >= emitted.length)
    return { sent: emitted, cut: [] };
  const carried = new Set(c.block_hashes);
  return {
    sent: emitted.filter((h) => carried.has(h)),
    cut: emitted.filter((h) => !carried.has(h)),
  };
}

/**
 * The blocks of a pin command its ack says the worker did not pin: those it did not hold
 * (`missing`) and those past its pin budget (`refused`, the ack's `skipped`: it pins in order and,
 * once the budget is spent, pins no new block, so they are the last of the rest). A block that
 * was evicted meanwhile says nothing about the budget. An ack without those fields (no answer, or
 * rejected) pinned the first `affected`; for a partial one the rest count as refused.
 */
export function unpinned(
  pin: readonly bigint[],
  a: CommandAcked,
): { dropped: bigint[]; refused: number } {
  if (a.status !== "partial" || (a.missing === undefined && a.skipped === undefined)) {
    const kept = a.status === "partial" ? (a.affected ?? 0) : 0;
    return { dropped: pin.slice(kept), refused: a.status === "partial" ? pin.length - kept : 0 };
  }
  const missing = new Set(a.missing ?? []);
  const found = pin.filter((h) => !missing.has(h));
  const refused = Math.min(a.skipped ?? 0, found.length);
  return {
    dropped: [...pin.filter((h) => missing.has(h)), ...found.slice(found.length - refused)],
    refused,
  };
}

/** Blocks both chains share from the start. */
export function commonBlocks(a: readonly bigint[], b: readonly bigint[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
