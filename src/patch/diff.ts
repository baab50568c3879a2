// Unified diff parser. Input is a patch file decoded as latin1 (see bytes.ts); output keeps every
// hunk line with its own '\n' (or without one where "\ No newline at end of file" follows), so the
// applier compares whole lines byte for byte, CR included.
import { splitLines } from "./bytes.js";
import { PatchError } from "./errors.js";

export type HunkLineOp = " " | "-" | "+";

export interface Hunk {
  oldStart: number;
  oldCount: number;
  newStart: number;
  newCount: number;
  /** The "@@ ... @@" line as written (for messages). */
  header: string;
  /** 1-based line of the "@@" header in the patch file. */
  patchLine: number;
  /** Lines the hunk expects (context and removals), each with its terminator. */
  oldLines: string[];
  /** Lines the hunk leaves (context and additions). */
  newLines: string[];
}

export interface FileDiff {
  /** Path relative to the package parent ('sglang/...'), or null for /dev/null. */
  oldPath: string | null;
  newPath: string | null;
  /** The path this diff acts on (newPath, or oldPath for a deletion). */
  path: string;
  kind: "modify" | "create" | "delete";
  hunks: Hunk[];
  /** 1-based line of the '--- ' line in the patch file. */
  patchLine: number;
}

export interface ParsedPatch {
  /** Free text before the first diff: what the patch does and why. */
  header: string;
  files: FileDiff[];
}

const HUNK_RE = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$/;

function stripEol(line: string): string {
  return line.replace(/\r?\n$/, "");
}

/** 'a/sglang/x.py\t2024-01-01 ...' -> 'sglang/x.py'; '/dev/null' -> null. */
function parsePath(raw: string, name: string, lineNo: number): string | null {
  let p = stripEol(raw);
  const tab = p.indexOf("\t");
  if (tab >= 0) p = p.slice(0, tab);
  p = p.trimEnd();
  if (p.startsWith('"') && p.endsWith('"')) p = p.slice(1, -1);
  if (p === "/dev/null") return null;
  const m = /^[ab]\/(.*)$/.exec(p);
  if (!m) {
    throw new PatchError(
      "malformed",
      `${name}:${lineNo}: path '${p}' must start with 'a/' or 'b/' (paths are 'a/sglang/...' and 'b/sglang/...', relative to the directory that contains sglang/)`,
    );
  }
  const rel = m[1];
  const parts = rel.split("/");
  if (parts[0] !== "sglang" || parts.length < 2 || parts.some((s) => s === ".." || s === "." || s === "")) {
    throw new PatchError(
      "malformed",
      `${name}:${lineNo}: path '${p}' must name a file inside the sglang package ('a/sglang/...'), without '..' or empty components`,
    );
  }
  return rel;
}

/**
 * Parses one patch file. `name` is used in error messages ('0001-x.patch:12: ...').
 * Text before the first '--- ' (or 'diff ') line is the header. Git extended header lines
 * (diff --git, index, mode lines) between diffs are accepted and ignored; renames, copies and
 * binary diffs are refused.
 */
export function parsePatch(text: string, name: string): ParsedPatch {
  const lines = splitLines(text);
  const files: FileDiff[] = [];
  const headerLines: string[] = [];
  let i = 0;
  let seenDiff = false;

  while (i < lines.length) {
    const line = lines[i];
    const lineNo = i + 1;
    const bare = stripEol(line);
    if (line.startsWith("--- ") && i + 1 < lines.length && lines[i + 1].startsWith("+++ ")) {
      seenDiff = true;
      const oldPath = parsePath(line.slice(4), name, lineNo);
      const newPath = parsePath(lines[i + 1].slice(4), name, lineNo + 1);
      if (oldPath === null && newPath === null) {
        throw new PatchError("malformed", `${name}:${lineNo}: both sides of the diff are /dev/null`);
      }
      if (oldPath !== null && newPath !== null && oldPath !== newPath) {
        throw new PatchError(
          "malformed",
          `${name}:${lineNo}: renames are not supported ('${oldPath}' -> '${newPath}'); delete the old file and create the new one`,
        );
      }
      const kind = oldPath === null ? "create" : newPath === null ? "delete" : "modify";
      const fd: FileDiff = { oldPath, newPath, path: (newPath ?? oldPath) as string, kind, hunks: [], patchLine: lineNo };
      i += 2;
      // Hunks.
      while (i < lines.length && lines[i].startsWith("@@")) {
        const hunkLineNo = i + 1;
        const hm = HUNK_RE.exec(stripEol(lines[i]));
        if (!hm) throw new PatchError("malformed", `${name}:${hunkLineNo}: bad hunk header ${JSON.stringify(stripEol(lines[i]))}`);
        const hunk: Hunk = {
          oldStart: Number(hm[1]),
          oldCount: hm[2] === undefined ? 1 : Number(hm[2]),
          newStart: Number(hm[3]),
          newCount: hm[4] === undefined ? 1 : Number(hm[4]),
          header: stripEol(lines[i]),
          patchLine: hunkLineNo,
          oldLines: [],
          newLines: [],
        };
        i++;
        let oldLeft = hunk.oldCount;
        let newLeft = hunk.newCount;
        // Which list(s) the previous line went to, for "\ No newline at end of file".
        let last: HunkLineOp | null = null;
        while (i < lines.length && (oldLeft > 0 || newLeft > 0 || lines[i].startsWith("\\"))) {
          const l = lines[i];
          const ln = i + 1;
          const c = l[0];
          if (c === "\\") {
            if (last === null) throw new PatchError("malformed", `${name}:${ln}: '\\ No newline at end of file' with no line before it`);
            const drop = (arr: string[]) => {
              const k = arr.length - 1;
              if (!arr[k].endsWith("\n")) throw new PatchError("malformed", `${name}:${ln}: repeated '\\' marker`);
              arr[k] = arr[k].slice(0, -1);
            };
            if (last === " " || last === "-") drop(hunk.oldLines);
            if (last === " " || last === "+") drop(hunk.newLines);
            last = null;
            i++;
            continue;
          }
          // A context line whose single space was stripped by an editor: an empty line.
          const isBlankContext = l === "\n" || l === "\r\n";
          const op: HunkLineOp | undefined = isBlankContext ? " " : c === " " || c === "-" || c === "+" ? c : undefined;
          if (op === undefined) {
            throw new PatchError(
              "malformed",
              `${name}:${ln}: hunk ${hunk.header} ends early: expected ${oldLeft} more old and ${newLeft} more new lines, found ${JSON.stringify(stripEol(l).slice(0, 60))}`,
            );
          }
          const body = isBlankContext ? l : l.slice(1);
          if (op === " " || op === "-") {
            if (oldLeft === 0) throw new PatchError("malformed", `${name}:${ln}: hunk ${hunk.header} has more old lines than its header says`);
            oldLeft--;
            hunk.oldLines.push(body);
          }
          if (op === " " || op === "+") {
            if (newLeft === 0) throw new PatchError("malformed", `${name}:${ln}: hunk ${hunk.header} has more new lines than its header says`);
            newLeft--;
            hunk.newLines.push(body);
          }
          last = op;
          i++;
        }
        if (oldLeft > 0 || newLeft > 0) {
          throw new PatchError(
            "malformed",
            `${name}:${lines.length}: hunk ${hunk.header} (line ${hunkLineNo}) is truncated: ${oldLeft} old and ${newLeft} new lines missing`,
          );
        }
        fd.hunks.push(hunk);
      }
      if (fd.hunks.length === 0 && !(kind === "create")) {
        throw new PatchError("malformed", `${name}:${lineNo}: diff of ${fd.path} has no hunks`);
      }
      if (kind === "create" && fd.hunks.some((h) => h.oldCount !== 0)) {
        throw new PatchError("malformed", `${name}:${lineNo}: new file ${fd.path} has a hunk with old lines`);
      }
      if (kind === "delete" && fd.hunks.some((h) => h.newCount !== 0)) {
        throw new PatchError("malformed", `${name}:${lineNo}: deleted file ${fd.path} has a hunk with new lines`);
      }
      files.push(fd);
      continue;
    }
    if (/^(rename|copy) (from|to) /.test(bare) || bare.startsWith("similarity index")) {
      throw new PatchError("malformed", `${name}:${lineNo}: renames and copies are not supported`);
    }
    if (bare.startsWith("GIT binary patch") || /^Binary files .* differ$/.test(bare)) {
      throw new PatchError("malformed", `${name}:${lineNo}: binary diffs are not supported`);
    }
    if (bare.startsWith("@@")) {
      throw new PatchError("malformed", `${name}:${lineNo}: hunk outside of a file diff (missing '--- a/...' / '+++ b/...' lines)`);
    }
    if (!seenDiff && bare.startsWith("diff ")) seenDiff = true;
    if (!seenDiff) headerLines.push(line);
    i++;
  }
  if (files.length === 0) {
    throw new PatchError("malformed", `${name}: no file diffs found (expected '--- a/sglang/...' and '+++ b/sglang/...' lines)`);
  }
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.path)) {
      throw new PatchError("malformed", `${name}:${f.patchLine}: ${f.path} appears twice in one patch; merge its hunks into one diff`);
    }
    seen.add(f.path);
  }
  return { header: headerLines.join("").replace(/\s+$/, ""), files };
}
