// Applies the hunks of one file diff to a file's content with exact context matching (no fuzz).
// A hunk may land at an offset from its stated line (as GNU patch allows, e.g. when an earlier
// hunk or patch moved lines), never with mismatching context; the nearest match wins and
// offsets are reported.
import { showLine, splitLines } from "./bytes.js";
import type { FileDiff, Hunk } from "./diff.js";

export interface HunkResult {
  index: number; // 1-based
  header: string;
  /** Where the hunk matched, relative to where its header said (0 = exact). */
  offset: number;
}

export interface HunkConflict {
  /** 1-based hunk number within the file diff. */
  hunk: number;
  header: string;
  /** 1-based line of the file where the first mismatch is (at the stated position). */
  line: number;
  expected: string | null;
  found: string | null;
  message: string;
}

export type ApplyFileResult =
  | { ok: true; content: string | null; hunks: HunkResult[] }
  | { ok: false; conflict: HunkConflict };

function matchesAt(lines: string[], pos: number, want: string[]): boolean {
  if (pos < 0 || pos + want.length > lines.length) return false;
  for (let k = 0; k < want.length; k++) if (lines[pos + k] !== want[k]) return false;
  return true;
}

function findHunk(lines: string[], want: string[], expected: number, min: number): number {
  const max = lines.length - want.length;
  if (max < min) return -1;
  const span = Math.max(expected - min, max - expected);
  for (let d = 0; d <= span; d++) {
    if (expected + d >= min && expected + d <= max && matchesAt(lines, expected + d, want))
      return expected + d;
    if (d > 0 && expected - d >= min && expected - d <= max && matchesAt(lines, expected - d, want))
      return expected - d;
  }
  return -1;
}

/** A conflict with no mismatching line to show (expected/found null). */
function conflictAt(hunk: number, header: string, line: number, message: string): HunkConflict {
  return { hunk, header, line, expected: null, found: null, message };
}

function describeMismatch(
  lines: string[],
  hunk: Hunk,
  index: number,
  pos: number,
  path: string,
): HunkConflict {
  const start = Math.max(0, Math.min(pos, lines.length));
  for (let k = 0; k < hunk.oldLines.length; k++) {
    const have = lines[start + k];
    const want = hunk.oldLines[k];
    if (have !== want) {
      const line = start + k + 1;
      const found = have === undefined ? null : have;
      let detail: string;
      if (found === null)
        detail = `the file ends at line ${lines.length}, expected ${showLine(want)}`;
      else if (found.replace(/\r?\n$/, "") === want.replace(/\r?\n$/, "")) {
        detail = `line endings differ: expected ${showLine(want)}, found ${showLine(found)}`;
      } else detail = `expected ${showLine(want)}, found ${showLine(found)}`;
      return {
        hunk: index,
        header: hunk.header,
        line,
        expected: want,
        found,
        message: `${path}: hunk #${index} ${hunk.header} does not apply: line ${line}: ${detail}`,
      };
    }
  }
  // Matches at the stated position but not after the previous hunk (overlap).
  return conflictAt(
    index,
    hunk.header,
    start + 1,
    `${path}: hunk #${index} ${hunk.header} overlaps the hunk before it`,
  );
}

/**
 * Applies a file diff to `content` (binary string; null when the file does not exist).
 * Returns the new content (null when the diff deletes the file) or the first conflict.
 */
export function applyFileDiff(fd: FileDiff, content: string | null): ApplyFileResult {
  const path = fd.path;
  if (fd.kind === "create") return createFile(fd, content);
  if (content === null) {
    const verb = fd.kind === "delete" ? "deletes" : "modifies";
    return {
      ok: false,
      conflict: conflictAt(
        1,
        fd.hunks[0]?.header ?? "",
        0,
        `${path}: file does not exist (the patch ${verb} it)`,
      ),
    };
  }
  const applied = applyHunks(fd, splitLines(content));
  if (!applied.ok) return applied;
  const { out, results } = applied;
  const joined = out.join("");
  if (fd.kind !== "delete") {
    // A line that lost its newline before the end would silently merge two lines.
    for (let j = 0; j < out.length - 1; j++) {
      if (!out[j].endsWith("\n")) {
        const message = `${path}: applying the hunks would leave line ${j + 1} without a newline in the middle of the file`;
        return { ok: false, conflict: conflictAt(0, "", j + 1, message) };
      }
    }
    return { ok: true, content: joined, hunks: results };
  }
  if (joined.length !== 0) {
    const message = `${path}: the patch deletes this file, but it has content the patch does not account for`;
    return {
      ok: false,
      conflict: conflictAt(fd.hunks.length, fd.hunks[fd.hunks.length - 1].header, 1, message),
    };
  }
  return { ok: true, content: null, hunks: results };
}

/** A file the diff creates: its hunks' lines, or a conflict when it exists already. */
function createFile(fd: FileDiff, content: string | null): ApplyFileResult {
  if (content !== null) {
    return {
      ok: false,
      conflict: conflictAt(
        1,
        fd.hunks[0]?.header ?? "(new file)",
        1,
        `${fd.path}: the patch creates this file, but it already exists`,
      ),
    };
  }
  return {
    ok: true,
    content: fd.hunks.flatMap((h) => h.newLines).join(""),
    hunks: fd.hunks.map((h, k) => ({ index: k + 1, header: h.header, offset: 0 })),
  };
}

/** Each hunk at its place in `lines` (offsets carried from one to the next), or the first that does not fit. */
function applyHunks(
  fd: FileDiff,
  lines: string[],
): { ok: true; out: string[]; results: HunkResult[] } | Extract<ApplyFileResult, { ok: false }> {
  const out: string[] = [];
  const results: HunkResult[] = [];
  let cursor = 0;
  let lastOffset = 0;
  for (let k = 0; k < fd.hunks.length; k++) {
    const h = fd.hunks[k];
    const stated = h.oldCount === 0 ? h.oldStart : h.oldStart - 1;
    const expected = stated + lastOffset;
    const pos = findHunk(lines, h.oldLines, Math.max(expected, cursor), cursor);
    if (pos < 0)
      return {
        ok: false,
        conflict: describeMismatch(lines, h, k + 1, Math.max(stated + lastOffset, 0), fd.path),
      };
    lastOffset = pos - stated;
    for (let j = cursor; j < pos; j++) out.push(lines[j]);
    out.push(...h.newLines);
    cursor = pos + h.oldLines.length;
    results.push({ index: k + 1, header: h.header, offset: pos - stated });
  }
  for (let j = cursor; j < lines.length; j++) out.push(lines[j]);
  return { ok: true, out, results };
}

/** The inverse diff (to test whether a patch is already in a tree that has no state file). */
export function reverseFileDiff(fd: FileDiff): FileDiff {
  return {
    ...fd,
    oldPath: fd.newPath,
    newPath: fd.oldPath,
    kind: fd.kind === "create" ? "delete" : fd.kind === "delete" ? "create" : "modify",
    hunks: fd.hunks.map((h) => ({
      ...h,
      oldStart: h.newStart,
      oldCount: h.newCount,
      newStart: h.oldStart,
      newCount: h.oldCount,
      oldLines: h.newLines,
      newLines: h.oldLines,
    })),
  };
}
