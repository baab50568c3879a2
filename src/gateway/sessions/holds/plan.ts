// What one write of a session record does to its holds, as a value: the record as changed, the
// commands to send once it lands, and the events to count and log once it lands. The session
// store runs a change again on every compare-and-set conflict, so nothing here counts, logs or
// sends: the ledger applies `sends` and `effects` once, after the write that made them is stored.
import type { PolicyCommand } from "../../../contract/policy.js";
import {
  adoptLegacyHolds,
  type HoldEffect,
  type HoldEnv,
  type HoldRecord,
  type HoldResult,
  prepareHold,
  releaseCommands,
  settleHold,
  syncLegacyFields,
} from "./holds.js";
import type { ReleaseRecord, SessionRecord } from "./record.js";

/** A command to send once the record naming its hold is stored, and what its outcome settles. */
export interface HoldSend {
  pc: PolicyCommand;
  effect: HoldEffect;
}

/** Something a write did that is counted or logged once it lands. */
export type HoldEvent =
  /** A hold left the record without a release (expired, its worker restarted, outcome unknown). */
  | { type: "dropped"; kind: HoldRecord["kind"]; why: string }
  /** The record was an older gateway's: its pins and leases were adopted as holds. */
  | { type: "adopted"; session: string }
  /** A hold command came back partial, error or unanswered. */
  | {
      type: "unsure";
      session: string;
      command: string;
      worker: string;
      status: string;
      release: boolean;
    }
  /** A release that found no hold left to release: not sent. */
  | { type: "skipped"; command: string };

export interface HoldPlan {
  record: SessionRecord;
  sends: HoldSend[];
  effects: HoldEvent[];
}

/** The env with its `dropped` hook turned into events of this write. */
function collecting(env: HoldEnv, effects: HoldEvent[]): HoldEnv {
  return { ...env, dropped: (h, why) => effects.push({ type: "dropped", kind: h.kind, why }) };
}

/** Adopts an older gateway's record (as the first step of every write to it). */
function adopt(rec: SessionRecord, env: HoldEnv, effects: HoldEvent[]): void {
  if (adoptLegacyHolds(rec, env)) effects.push({ type: "adopted", session: rec.id });
}

/** Before `pc` is sent: the hold it takes, or the part of named holds it releases, in `rec`. */
export function planHold(rec: SessionRecord, pc: PolicyCommand, base: HoldEnv): HoldPlan {
  const effects: HoldEvent[] = [];
  const env = collecting(base, effects);
  adopt(rec, env, effects);
  const out = prepareHold(rec, pc, env);
  syncLegacyFields(rec);
  if (!out.pc) effects.push({ type: "skipped", command: pc.command.type });
  return {
    record: rec,
    sends: out.pc ? [{ pc: out.pc, effect: out.effect }] : [],
    effects,
  };
}

/** One worker's outcome of a command, applied to the holds its effect names. */
export function planSettle(
  rec: SessionRecord,
  pc: PolicyCommand,
  effect: HoldEffect,
  worker: string,
  res: HoldResult,
  base: HoldEnv,
): HoldPlan {
  const effects: HoldEvent[] = [];
  const env = collecting(base, effects);
  adopt(rec, env, effects);
  settleHold(rec, effect, res, env.now);
  if (res.status === "error" || res.status === "failed" || res.status === "partial")
    effects.push({
      type: "unsure",
      session: rec.id,
      command: pc.command.type,
      worker,
      status: res.status,
      release: effect !== null && "release" in effect,
    });
  syncLegacyFields(rec);
  return { record: rec, sends: [], effects };
}

/**
 * The releases of every hold `pick` selects (and the recorded releases `resend` sends again);
 * `note`, when given and something is released, says in the record why this replica did it.
 */
export function planRelease(
  rec: SessionRecord,
  base: HoldEnv,
  pick: (h: HoldRecord) => boolean,
  reason: string,
  resend: (e: ReleaseRecord) => boolean,
  note: { state: string; reason: string; always: boolean } | null = null,
): HoldPlan {
  const effects: HoldEvent[] = [];
  const env = collecting(base, effects);
  adopt(rec, env, effects);
  const sends = releaseCommands(rec, env, pick, reason, resend);
  if (note && (note.always || sends.length))
    rec.commands.push({
      id: null,
      worker: sends[0]?.pc.worker ?? rec.worker ?? "",
      type: "Cache",
      reason: note.reason,
      createdMs: env.now,
      state: note.state,
      ackedMs: null,
      detail: `${sends.length} release(s) sent`,
    });
  syncLegacyFields(rec);
  return { record: rec, sends, effects };
}
