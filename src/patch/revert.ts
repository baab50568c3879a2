// `kvctl patch revert`: restore every recorded file from its byte-exact backup, remove placed
// files, backups and the state file, in one transaction. Needs only the state, not the series.
// Refuses, changing nothing, when a patched or placed file was edited since apply (unless force).
import { join, relative } from "node:path";
import { sha256 } from "./bytes.js";
import { describeDrift, readRel, treeDrift, treeInfo, type TreeInfo } from "./context.js";
import { PatchError } from "./errors.js";
import { locateSglang } from "./locate.js";
import { withLock } from "./lock.js";
import { BACKUP_DIR, type PatchState, readState, statePath } from "./state.js";
import { commitWrites, recoverInterrupted, type WriteOp } from "./txn.js";

export interface RevertOptions {
  /** Discard hand edits of patched/placed files. */
  force?: boolean;
  sglangVersion?: string;
  failAfterWrites?: number;
}

export interface RevertResult {
  ok: boolean;
  action: "reverted" | "not-applied";
  tree: TreeInfo;
  series: string | null;
  patches: string[];
  restored: string[];
  removed: string[];
  discarded: string[];
  /** What this run did first about an earlier run that was killed mid-write, if there was one. */
  recovered: string | null;
  messages: string[];
}

export function revertSeries(path: string, opts: RevertOptions = {}): RevertResult {
  const tree = locateSglang(path, { sglangVersion: opts.sglangVersion });
  return withLock(tree.pkg, () => {
    const parent = tree.parent;
    const recovered = recoverInterrupted(parent);
    const state = readState(parent);
    const result: RevertResult = {
      ok: true,
      action: "not-applied",
      tree: treeInfo(tree),
      series: state?.series ?? null,
      patches: state?.patches.map((p) => p.name) ?? [],
      restored: [],
      removed: [],
      discarded: [],
      recovered,
      messages: recovered ? [recovered] : [],
    };
    if (!state) {
      result.messages.push(
        `nothing to revert: no kvctl patches are recorded in ${tree.pkg} (no ${relative(parent, statePath(parent))})`,
      );
      return result;
    }
    const drift = treeDrift(parent, state);
    if (drift.length > 0 && !opts.force) {
      throw new PatchError(
        "drift",
        `refusing to revert: ${describeDrift(drift)}. Nothing was changed. Save your edits (e.g. as a patch), then run revert with --force to restore the originals anyway.`,
      );
    }
    result.discarded = drift.map((d) => d.path);
    const ops = revertWrites(parent, state, result);
    commitWrites(parent, "revert", ops, {
      failAfterWrites: opts.failAfterWrites,
      cleanupDirs: state.createdDirs,
      pruneDirs: [`sglang/${BACKUP_DIR}`],
    });
    result.action = "reverted";
    for (const p of [...state.patches].reverse())
      result.messages.push(
        `reverted ${p.name} (${p.files.length} file${p.files.length === 1 ? "" : "s"})`,
      );
    if (state.placed.length)
      result.messages.push(
        `removed ${state.placed.length} placed file${state.placed.length === 1 ? "" : "s"}`,
      );
    if (result.discarded.length)
      result.messages.push(`discarded hand edits (--force): ${result.discarded.join(", ")}`);
    result.messages.push(
      `reverted series ${state.series}: ${tree.pkg} holds the original files again (${result.restored.length} restored, ${result.removed.length} removed)`,
    );
    return result;
  });
}

/** The writes that put the originals back and remove placed files, backups and the state file. */
function revertWrites(parent: string, state: PatchState, result: RevertResult): WriteOp[] {
  const ops: WriteOp[] = [];
  for (const f of state.files) {
    let original: Buffer | null = null;
    if (f.originalSha256 !== null) {
      original = f.backup ? readRel(parent, f.backup) : null;
      if (original === null || sha256(original) !== f.originalSha256) {
        throw new PatchError(
          "state",
          `cannot revert ${f.path}: its backup ${f.backup ?? "(none)"} is missing or does not match the recorded sha256. Nothing was changed. Reinstall SGLang to get the original back.`,
        );
      }
    }
    const have = readRel(parent, f.path);
    const same = original === null ? have === null : have?.equals(original);
    if (!same) {
      ops.push({ path: join(parent, f.path), content: original, mode: f.originalMode ?? 0o644 });
      (original === null ? result.removed : result.restored).push(f.path);
    }
  }
  for (const p of state.placed) {
    if (readRel(parent, p.path) !== null) {
      ops.push({ path: join(parent, p.path), content: null });
      result.removed.push(p.path);
    }
  }
  for (const f of state.files)
    if (f.backup && readRel(parent, f.backup) !== null)
      ops.push({ path: join(parent, f.backup), content: null });
  ops.push({ path: statePath(parent), content: null });
  return ops;
}
