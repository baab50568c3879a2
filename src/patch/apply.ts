// `kvctl patch apply`: stage the whole series from the original files, refuse on any conflict,
// then write backups, patched files, placed files and the state file in one transaction.
// Applying over an earlier apply re-stages from the backed-up originals, so a changed series or
// changed python/ sources are brought in without a revert; an unchanged one is a no-op.
import { existsSync, statSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fromBin, sha256 } from "./bytes.js";
import {
  type CommonOptions,
  type Context,
  describeDrift,
  loadContext,
  originalReader,
  readRel,
  type TreeInfo,
  treeDrift,
  treeInfo,
} from "./context.js";
import { PatchError } from "./errors.js";
import { withLock } from "./lock.js";
import { kvctlVersion } from "./repo.js";
import { describeMappings } from "./series.js";
import { type PatchOutcome, type Staged, stageSeries } from "./stage.js";
import {
  BACKUP_DIR,
  backupRel,
  readState,
  serializeState,
  statePath,
  type FileRecord,
  type PatchState,
} from "./state.js";
import { commitWrites, recoverInterrupted, type WriteOp } from "./txn.js";

export interface ApplyOptions extends CommonOptions {
  /** Re-apply over hand edits of an applied tree (they are lost). */
  force?: boolean;
  /** Test hook: fail after this many writes (the transaction must roll back). */
  failAfterWrites?: number;
}

export interface ApplyResult {
  ok: boolean;
  /** applied: fresh; updated: an earlier apply brought up to date; already-applied: nothing to do; conflict: nothing written. */
  action: "applied" | "updated" | "already-applied" | "conflict";
  tree: TreeInfo;
  series: { name: string; dir: string; version: string };
  patches: PatchOutcome[];
  placed: { path: string; source: string }[];
  placedConflicts: string[];
  /** Paths (relative to the package parent) written or deleted. */
  changed: string[];
  statePath: string;
  /** What this run did first about an earlier run that was killed mid-write, if there was one. */
  recovered: string | null;
  messages: string[];
}

const plural = (n: number, w: string) => `${n} ${w}${n === 1 ? "" : "s"}`;

export function describeOutcome(p: PatchOutcome, verb: string): string {
  if (p.status === "conflict" && p.conflict) return `CONFLICT ${p.name}: ${p.conflict.message}`;
  if (p.status === "applied-untracked") {
    return `CONFLICT ${p.name}: it seems to be in the tree already, but not applied by kvctl (its reverse applies cleanly); restore the original SGLang files (reinstall) and apply again`;
  }
  const offs = p.files
    .flatMap((f) => f.offsets.map((o, k) => ({ f: f.path, k, o })))
    .filter((x) => x.o !== 0);
  const tail = offs.length
    ? `; ${offs.map((x) => `${x.f} hunk #${x.k + 1} at offset ${x.o > 0 ? "+" : ""}${x.o}`).join(", ")}`
    : "";
  return `${verb} ${p.name} (${plural(p.files.length, "file")}, ${plural(p.hunks, "hunk")}${tail})`;
}

/** Directories between `pkg` and each file's directory that do not exist yet. */
function missingDirs(parent: string, rels: string[]): string[] {
  const out = new Set<string>();
  for (const rel of rels) {
    for (let d = dirname(join(parent, rel)); !existsSync(d); d = dirname(d))
      out.add(relative(parent, d).split(sep).join("/"));
  }
  return [...out].sort((a, b) => a.length - b.length);
}

export function applySeries(path: string, opts: ApplyOptions = {}): ApplyResult {
  const { tree, series } = loadContext(path, opts);
  return withLock(tree.pkg, () => {
    const parent = tree.parent;
    const recovered = recoverInterrupted(parent);
    // Read under the lock (and after recovery): another run may have changed it since loadContext.
    const state = readState(parent);
    checkEarlierApply(tree, state, opts);
    const read = originalReader(parent, state);
    const staged = stageSeries(series, read);
    const result = initialResult(tree, series, staged, recovered);
    if (!staged.ok) return conflictResult(result, staged, tree);
    const want = desiredTree(parent, staged, state, read);
    const plan = plannedWrites(parent, want);
    const newState = nextState(tree, series, staged, want.fileRecords, state, plan.treeOps);
    if (
      sameRecord(state, newState) &&
      plan.treeOps.length === 0 &&
      plan.backupWrites.length === 0 &&
      plan.backupDeletes.length === 0
    ) {
      return alreadyApplied(result, staged, series, tree);
    }
    const sp = statePath(parent);
    const pending = serializeState({ ...newState, status: "applying" });
    const ops: WriteOp[] = [
      ...plan.backupWrites,
      { path: sp, content: pending, mode: 0o644 },
      ...plan.treeOps,
      ...plan.backupDeletes,
      { path: sp, content: serializeState(newState), mode: 0o644 },
    ];
    commitWrites(parent, "apply", ops, {
      failAfterWrites: opts.failAfterWrites,
      // Directories of an earlier apply that are empty now, and backups no longer needed.
      cleanupDirs: state?.createdDirs ?? [],
      pruneDirs: [`sglang/${BACKUP_DIR}`],
    });
    result.ok = true;
    result.action = state ? "updated" : "applied";
    result.changed = plan.changed;
    result.messages.push(...appliedMessages(staged, series, state, plan.changed));
    result.messages.push(
      `${state ? "updated" : "applied"} series ${series.name} to ${tree.pkg}: state in ${relative(parent, sp)}, originals backed up under sglang/.kvctl-orig/`,
    );
    return result;
  });
}

type Tree = Context["tree"];
type Series = Context["series"];

/** Refuses an apply over an interrupted one, or over hand edits unless forced. */
function checkEarlierApply(tree: Tree, state: PatchState | null, opts: ApplyOptions): void {
  if (state && state.status === "applying") {
    throw new PatchError(
      "state",
      `an earlier apply to ${tree.pkg} was interrupted (state file says 'applying'); run 'kvctl patch revert ${tree.input}' to restore the originals, then apply again`,
    );
  }
  if (!state) return;
  const drift = treeDrift(tree.parent, state);
  if (drift.length > 0 && !opts.force) {
    throw new PatchError(
      "drift",
      `the patched tree was changed by hand since apply: ${describeDrift(drift)}. Nothing was changed. ` +
        `Save your edits as a patch, then 'kvctl patch revert --force' or 'apply --force' (both discard them).`,
    );
  }
}

function initialResult(
  tree: Tree,
  series: Series,
  staged: Staged,
  recovered: string | null,
): ApplyResult {
  return {
    ok: false,
    action: "conflict",
    tree: treeInfo(tree),
    series: { name: series.name, dir: series.dir, version: series.version },
    patches: staged.patches,
    placed: staged.placed.map((p) => ({ path: p.target, source: p.source })),
    placedConflicts: staged.placedConflicts,
    changed: [],
    statePath: statePath(tree.parent),
    recovered,
    messages: recovered ? [recovered] : [],
  };
}

function conflictResult(result: ApplyResult, staged: Staged, tree: Tree): ApplyResult {
  for (const p of staged.patches)
    result.messages.push(
      p.status === "ok" ? `ok ${p.name} (would apply)` : describeOutcome(p, "ok"),
    );
  for (const c of staged.placedConflicts) result.messages.push(`CONFLICT placed file: ${c}`);
  result.messages.push(`nothing was changed: the series does not apply to ${tree.pkg}`);
  return result;
}

/** The tree as the apply leaves it: final bytes per path (null: absent), backups, file records. */
interface DesiredTree {
  /** Desired final bytes of every path involved (relative to the package parent). */
  desired: Map<string, Buffer | null>;
  backupOps: Map<string, Buffer | null>;
  fileRecords: FileRecord[];
}

function desiredTree(
  parent: string,
  staged: Staged,
  state: PatchState | null,
  read: (rel: string) => string | null,
): DesiredTree {
  const desired = new Map<string, Buffer | null>();
  const fileRecords: FileRecord[] = [];
  for (const [p, content] of staged.results) {
    const orig = staged.originals.get(p) ?? null;
    desired.set(p, content === null ? null : fromBin(content));
    const origMode =
      orig === null
        ? null
        : existsSync(join(parent, p))
          ? statSync(join(parent, p)).mode & 0o7777
          : 0o644;
    const prev = state?.files.find((f) => f.path === p);
    fileRecords.push({
      path: p,
      action: orig === null ? "create" : content === null ? "delete" : "modify",
      originalSha256: orig === null ? null : sha256(orig),
      patchedSha256: content === null ? null : sha256(content),
      backup: orig === null ? null : backupRel(p),
      originalMode: prev ? prev.originalMode : origMode,
      patches: staged.touchedBy.get(p) ?? [],
    });
  }
  for (const pl of staged.placed) desired.set(pl.target, pl.content);
  // Paths of the earlier apply that this series no longer touches go back to their originals.
  const backupOps = new Map<string, Buffer | null>();
  for (const f of state?.files ?? []) {
    if (!desired.has(f.path)) {
      const o = read(f.path);
      desired.set(f.path, o === null ? null : fromBin(o));
    }
    if (f.backup && !staged.results.has(f.path)) backupOps.set(f.backup, null);
  }
  for (const pl of state?.placed ?? []) if (!desired.has(pl.path)) desired.set(pl.path, null);
  for (const f of fileRecords) {
    if (f.backup) {
      const orig = staged.originals.get(f.path);
      backupOps.set(f.backup, orig === null || orig === undefined ? null : fromBin(orig));
    }
  }
  return { desired, backupOps, fileRecords };
}

/** The writes that take the tree from what it is to what it should be (unchanged paths skipped). */
function plannedWrites(
  parent: string,
  want: DesiredTree,
): { backupWrites: WriteOp[]; backupDeletes: WriteOp[]; treeOps: WriteOp[]; changed: string[] } {
  const differs = (rel: string, bytes: Buffer | null) => {
    const have = readRel(parent, rel);
    return bytes === null ? have !== null : have === null || !have.equals(bytes);
  };
  const backupWrites: WriteOp[] = [];
  const backupDeletes: WriteOp[] = [];
  for (const [rel, bytes] of want.backupOps) {
    if (!differs(rel, bytes)) continue;
    (bytes === null ? backupDeletes : backupWrites).push({
      path: join(parent, rel),
      content: bytes,
      mode: 0o644,
    });
  }
  const treeOps: WriteOp[] = [];
  const changed: string[] = [];
  for (const [rel, bytes] of want.desired) {
    if (!differs(rel, bytes)) continue;
    const rec = want.fileRecords.find((f) => f.path === rel);
    treeOps.push({ path: join(parent, rel), content: bytes, mode: rec?.originalMode ?? 0o644 });
    changed.push(rel);
  }
  return { backupWrites, backupDeletes, treeOps, changed };
}

function nextState(
  tree: Tree,
  series: Series,
  staged: Staged,
  fileRecords: FileRecord[],
  state: PatchState | null,
  treeOps: WriteOp[],
): PatchState {
  const parent = tree.parent;
  const written = treeOps
    .filter((o) => o.content !== null)
    .map((o) => relative(parent, o.path).split(sep).join("/"));
  return {
    format: 1,
    tool: "kvctl",
    kvctlVersion: kvctlVersion(),
    status: "applied",
    series: series.name,
    seriesDir: series.dir,
    sglangVersion: tree.version as string,
    appliedAt: new Date().toISOString(),
    patches: staged.patches.map((p) => ({
      name: p.name,
      sha256: p.sha256,
      files: p.files.map((f) => f.path),
      hunks: p.hunks,
    })),
    files: fileRecords,
    placed: staged.placed.map((p) => ({ path: p.target, source: p.source, sha256: p.sha256 })),
    createdDirs: [...new Set([...(state?.createdDirs ?? []), ...missingDirs(parent, written)])],
  };
}

/** Whether the state file would record the same series, patches, placed files and file hashes. */
function sameRecord(state: PatchState | null, next: PatchState): boolean {
  const hashes = (s: PatchState) =>
    JSON.stringify(s.files.map((f) => [f.path, f.originalSha256, f.patchedSha256]));
  return (
    state !== null &&
    state.series === next.series &&
    JSON.stringify(state.patches) === JSON.stringify(next.patches) &&
    JSON.stringify(state.placed) === JSON.stringify(next.placed) &&
    hashes(state) === hashes(next)
  );
}

function alreadyApplied(
  result: ApplyResult,
  staged: Staged,
  series: Series,
  tree: Tree,
): ApplyResult {
  result.ok = true;
  result.action = "already-applied";
  for (const p of staged.patches) result.messages.push(`already applied ${p.name}`);
  if (staged.placed.length)
    result.messages.push(`placed files up to date (${plural(staged.placed.length, "file")})`);
  result.messages.push(`already applied: series ${series.name} is in ${tree.pkg}; nothing changed`);
  return result;
}

function appliedMessages(
  staged: Staged,
  series: Series,
  state: PatchState | null,
  changed: string[],
): string[] {
  const out: string[] = [];
  const prevByName = new Map(state?.patches.map((p) => [p.name, p.sha256]) ?? []);
  for (const p of staged.patches) {
    const verb =
      prevByName.get(p.name) === p.sha256
        ? "unchanged"
        : prevByName.has(p.name)
          ? "re-applied"
          : "applied";
    out.push(describeOutcome(p, verb));
  }
  for (const old of state?.patches ?? []) {
    if (!staged.patches.some((p) => p.name === old.name))
      out.push(`removed ${old.name} (no longer in the series)`);
  }
  if (staged.placed.length) {
    const groups = describeMappings(series);
    const placedChanged = staged.placed.filter((p) => changed.includes(p.target)).length;
    out.push(
      `placed ${plural(staged.placed.length, "file")} (${groups})${state ? `, ${placedChanged} updated` : ""}`,
    );
  }
  return out;
}
