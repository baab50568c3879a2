// `kvctl patch check`: a dry run. Stages the series from the originals and reports, per patch,
// applied / would apply / conflict (file, hunk, first mismatching line). Writes nothing.
import {
  describeDrift,
  loadContext,
  originalReader,
  treeDrift,
  treeInfo,
  type CommonOptions,
  type DriftEntry,
  type TreeInfo,
} from "./context.js";
import { describeOutcome } from "./apply.js";
import { describeMappings } from "./series.js";
import { stageSeries, type PatchOutcome } from "./stage.js";
import { interruptedRun } from "./txn.js";

export type CheckStatus = "applied" | "would-apply" | "conflict" | "applied-untracked";

export interface CheckPatch extends Omit<PatchOutcome, "status"> {
  status: CheckStatus;
  message: string;
}

export interface CheckResult {
  /** true when the series is applied or would apply cleanly, and the applied tree has no hand edits. */
  ok: boolean;
  tree: TreeInfo;
  series: { name: string; dir: string; version: string };
  patches: CheckPatch[];
  placed: { path: string; source: string }[];
  placedConflicts: string[];
  drift: DriftEntry[];
  interrupted: boolean;
  messages: string[];
}

export function checkSeries(path: string, opts: CommonOptions = {}): CheckResult {
  const { tree, series, state } = loadContext(path, opts);
  const staged = stageSeries(series, originalReader(tree.parent, state));
  const drift = state ? treeDrift(tree.parent, state) : [];
  // Check writes nothing: a killed run's journal is left for the next apply, revert or status.
  const journaled = interruptedRun(tree.parent);
  const interrupted = state?.status === "applying" || journaled;
  const recorded = new Map(
    state?.status === "applied" ? state.patches.map((p) => [p.name, p.sha256]) : [],
  );
  const patches: CheckPatch[] = staged.patches.map((p) => {
    let status: CheckStatus = p.status === "ok" ? "would-apply" : p.status;
    if (p.status === "ok" && recorded.get(p.name) === p.sha256) status = "applied";
    const message =
      status === "applied"
        ? `applied ${p.name}`
        : status === "would-apply"
          ? describeOutcome(p, "would apply")
          : describeOutcome(p, "");
    return { ...p, status, message };
  });
  const messages = patches.map((p) => p.message);
  for (const c of staged.placedConflicts) messages.push(`CONFLICT placed file: ${c}`);
  if (staged.placed.length)
    messages.push(`${staged.placed.length} placed file(s) from ${describeMappings(series)}`);
  if (drift.length) messages.push(`DRIFT: ${describeDrift(drift)}`);
  if (journaled) {
    messages.push(
      `INTERRUPTED: an earlier apply or revert was killed mid-write; the next 'kvctl patch apply', 'revert' or 'status' finishes or undoes it`,
    );
  } else if (interrupted)
    messages.push(`INTERRUPTED: an earlier apply did not finish; run 'kvctl patch revert' first`);
  const ok = staged.ok && drift.length === 0 && !interrupted;
  const conflicts = patches.filter(
    (p) => p.status === "conflict" || p.status === "applied-untracked",
  ).length;
  messages.push(
    ok
      ? patches.every((p) => p.status === "applied")
        ? `series ${series.name} is applied to ${tree.pkg}`
        : `series ${series.name} applies cleanly to ${tree.pkg}`
      : `series ${series.name}: ${conflicts} conflicting patch(es)${staged.placedConflicts.length ? `, ${staged.placedConflicts.length} placed-file conflict(s)` : ""}${drift.length ? `, ${drift.length} drifted file(s)` : ""}`,
  );
  return {
    ok,
    tree: treeInfo(tree),
    series: { name: series.name, dir: series.dir, version: series.version },
    patches,
    placed: staged.placed.map((p) => ({ path: p.target, source: p.source })),
    placedConflicts: staged.placedConflicts,
    drift,
    interrupted,
    messages,
  };
}
