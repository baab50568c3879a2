// Stages a whole series in memory against the original tree: every hunk of every patch is
// matched before a single byte is written. The result says, per patch, whether it applies (and
// where), conflicts (file, hunk, first mismatching line), or is already in the tree untracked.
import { readFileSync } from "node:fs";
import { sha256 } from "./bytes.js";
import { fsError } from "./errors.js";
import { applyFileDiff, reverseFileDiff, type HunkConflict } from "./hunks.js";
import { placedFiles, type Series, type SeriesPatch } from "./series.js";

export type PatchStatus = "ok" | "conflict" | "applied-untracked";

export interface PatchOutcome {
  name: string;
  sha256: string;
  /** First line of the patch header (what it does). */
  summary: string;
  status: PatchStatus;
  files: { path: string; kind: "modify" | "create" | "delete"; hunks: number; offsets: number[] }[];
  hunks: number;
  conflict?: HunkConflict & { file: string };
}

export interface StagedPlaced {
  target: string;
  source: string;
  content: Buffer;
  sha256: string;
}

export interface Staged {
  ok: boolean;
  patches: PatchOutcome[];
  /** Original content (latin1 string, null = absent) of every path a patch touches. */
  originals: Map<string, string | null>;
  /** Final content of every path a patch touches. */
  results: Map<string, string | null>;
  touchedBy: Map<string, string[]>;
  placed: StagedPlaced[];
  placedConflicts: string[];
}

/** `read(rel)` returns the ORIGINAL content of a path relative to the package parent, or null. */
export function stageSeries(series: Series, read: (rel: string) => string | null): Staged {
  const originals = new Map<string, string | null>();
  const results = new Map<string, string | null>();
  const touchedBy = new Map<string, string[]>();
  const current = (p: string): string | null => {
    if (results.has(p)) return results.get(p) as string | null;
    if (!originals.has(p)) originals.set(p, read(p));
    return originals.get(p) as string | null;
  };
  const patches: PatchOutcome[] = [];
  for (const sp of series.patches) {
    const { outcome, local } = stagePatch(sp, current);
    if (outcome.status === "ok") {
      for (const [p, c] of local) {
        results.set(p, c);
        touchedBy.set(p, [...(touchedBy.get(p) ?? []), sp.name]);
      }
    } else {
      // Is it there already (applied by hand or by another tool)? Its reverse then applies.
      const reversible = sp.parsed.files.every(
        (fd) => applyFileDiff(reverseFileDiff(fd), current(fd.path)).ok,
      );
      if (reversible) outcome.status = "applied-untracked";
    }
    patches.push(outcome);
  }
  const { placed, placedConflicts } = stagePlaced(series, read, (p) =>
    Boolean(touchedBy.has(p) || originals.has(p)),
  );
  const ok = patches.every((p) => p.status === "ok") && placedConflicts.length === 0;
  return { ok, patches, originals, results, touchedBy, placed, placedConflicts };
}

/** One patch over the contents so far: its outcome, and the files it leaves (when it applies). */
function stagePatch(
  sp: SeriesPatch,
  current: (p: string) => string | null,
): { outcome: PatchOutcome; local: Map<string, string | null> } {
  const summary =
    sp.parsed.header
      .split("\n")
      .find((l) => l.trim() !== "")
      ?.trim() ?? "";
  const hunks = sp.parsed.files.reduce((n, fd) => n + fd.hunks.length, 0);
  const outcome: PatchOutcome = {
    name: sp.name,
    sha256: sp.sha256,
    summary,
    status: "ok",
    files: [],
    hunks,
  };
  const local = new Map<string, string | null>();
  for (const fd of sp.parsed.files) {
    const r = applyFileDiff(fd, current(fd.path));
    if (!r.ok) {
      outcome.status = "conflict";
      // expected/found as UTF-8 text for JSON consumers (they are latin1-decoded bytes here).
      const text = (x: string | null) =>
        x === null ? null : Buffer.from(x, "latin1").toString("utf8");
      outcome.conflict = {
        ...r.conflict,
        expected: text(r.conflict.expected),
        found: text(r.conflict.found),
        file: fd.path,
      };
      break;
    }
    local.set(fd.path, r.content);
    outcome.files.push({
      path: fd.path,
      kind: fd.kind,
      hunks: fd.hunks.length,
      offsets: r.hunks.map((h) => h.offset),
    });
  }
  return { outcome, local };
}

/** The files the series places, and every one that would collide with a patch or the tree. */
function stagePlaced(
  series: Series,
  read: (rel: string) => string | null,
  patched: (rel: string) => boolean,
): { placed: StagedPlaced[]; placedConflicts: string[] } {
  const placed: StagedPlaced[] = [];
  const placedConflicts: string[] = [];
  for (const pf of placedFiles(series)) {
    let content: Buffer;
    try {
      content = readFileSync(pf.sourceAbs);
    } catch (err) {
      throw fsError(err, "read placed source", pf.sourceAbs);
    }
    if (patched(pf.target)) {
      placedConflicts.push(`${pf.target} is both placed from ${pf.source} and changed by a patch`);
    } else if (read(pf.target) !== null) {
      placedConflicts.push(
        `${pf.target} (from ${pf.source}) would overwrite a file that exists in the SGLang tree`,
      );
    }
    placed.push({ target: pf.target, source: pf.source, content, sha256: sha256(content) });
  }
  return { placed, placedConflicts };
}
