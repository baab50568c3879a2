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
  if (
    parts[0] !== "sglang" ||
    parts.length < 2 ||
    parts.some((s) => s === ".." || s === "." || s === "")
  ) {
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
  const r = new DiffReader(splitLines(text), name);
  const files: FileDiff[] = [];
  const headerLines: string[] = [];
  let seenDiff = false;
  while (r.i < r.lines.length) {
    const line = r.lines[r.i];
    if (
      line.startsWith("--- ") &&
      r.i + 1 < r.lines.length &&
      r.lines[r.i + 1].startsWith("+++ ")
    ) {
      seenDiff = true;
      files.push(r.fileDiff());
      continue;
    }
    const bare = stripEol(line);
    refuseUnsupported(bare, `${name}:${r.i + 1}`);
    if (!seenDiff && bare.startsWith("diff ")) seenDiff = true;
    if (!seenDiff) headerLines.push(line);
    r.i++;
  }
  if (files.length === 0) {
    throw new PatchError(
      "malformed",
      `${name}: no file diffs found (expected '--- a/sglang/...' and '+++ b/sglang/...' lines)`,
    );
  }
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.path)) {
      throw new PatchError(
        "malformed",
        `${name}:${f.patchLine}: ${f.path} appears twice in one patch; merge its hunks into one diff`,
      );
    }
    seen.add(f.path);
  }
  return { header: headerLines.join("").replace(/\s+$/, ""), files };
}

/** Lines outside a file diff that name something this parser does not apply. */
function refuseUnsupported(bare: string, at: string): void {
  if (/^(rename|copy) (from|to) /.test(bare) || bare.startsWith("similarity index")) {
    throw new PatchError("malformed", `${at}: renames and copies are not supported`);
  }
  if (bare.startsWith("GIT binary patch") || /^Binary files .* differ$/.test(bare)) {
    throw new PatchError("malformed", `${at}: binary diffs are not supported`);
  }
  if (bare.startsWith("@@")) {
    throw new PatchError(
      "malformed",
      `${at}: hunk outside of a file diff (missing '--- a/...' / '+++ b/...' lines)`,
    );
  }
}

/** A cursor over the patch's lines (i: the next line, 0-based); errors name the file and line. */
class DiffReader {
  i = 0;
  constructor(
    readonly lines: string[],
    readonly name: string,
  ) {}

  private fail(lineNo: number, message: string): never {
    throw new PatchError("malformed", `${this.name}:${lineNo}: ${message}`);
  }

  /** The '--- '/'+++ ' pair at i and the hunks after it. */
  fileDiff(): FileDiff {
    const { lines, name } = this;
    const lineNo = this.i + 1;
    const oldPath = parsePath(lines[this.i].slice(4), name, lineNo);
    const newPath = parsePath(lines[this.i + 1].slice(4), name, lineNo + 1);
    if (oldPath === null && newPath === null)
      this.fail(lineNo, "both sides of the diff are /dev/null");
    if (oldPath !== null && newPath !== null && oldPath !== newPath) {
      this.fail(
        lineNo,
        `renames are not supported ('${oldPath}' -> '${newPath}'); delete the old file and create the new one`,
      );
    }
    const kind = oldPath === null ? "create" : newPath === null ? "delete" : "modify";
    const fd: FileDiff = {
      oldPath,
      newPath,
      path: (newPath ?? oldPath) as string,
      kind,
      hunks: [],
      patchLine: lineNo,
    };
    this.i += 2;
    while (this.i < lines.length && lines[this.i].startsWith("@@")) fd.hunks.push(this.hunk());
    if (fd.hunks.length === 0 && !(kind === "create"))
      this.fail(lineNo, `diff of ${fd.path} has no hunks`);
    if (kind === "create" && fd.hunks.some((h) => h.oldCount !== 0))
      this.fail(lineNo, `new file ${fd.path} has a hunk with old lines`);
    if (kind === "delete" && fd.hunks.some((h) => h.newCount !== 0))
      this.fail(lineNo, `deleted file ${fd.path} has a hunk with new lines`);
    return fd;
  }

  /** The hunk whose '@@' header is at i, through its last line. */
  private hunk(): Hunk {
    const hunkLineNo = this.i + 1;
    const header = stripEol(this.lines[this.i]);
    const hm = HUNK_RE.exec(header);
    if (!hm) this.fail(hunkLineNo, `bad hunk header ${JSON.stringify(header)}`);
    const hunk: Hunk = {
      oldStart: Number(hm[1]),
      oldCount: hm[2] === undefined ? 1 : Number(hm[2]),
      newStart: Number(hm[3]),
      newCount: hm[4] === undefined ? 1 : Number(hm[4]),
      header,
      patchLine: hunkLineNo,
      oldLines: [],
      newLines: [],
    };
    this.i++;
    const left = this.hunkBody(hunk);
    if (left.old > 0 || left.new > 0) {
      this.fail(
        this.lines.length,
        `hunk ${hunk.header} (line ${hunkLineNo}) is truncated: ${left.old} old and ${left.new} new lines missing`,
      );
    }
    return hunk;
  }

  /** Reads the hunk's lines into it; returns how many old and new lines its header promised and are missing. */
  private hunkBody(hunk: Hunk): { old: number; new: number } {
    const { lines } = this;
    const left = { old: hunk.oldCount, new: hunk.newCount };
    // Which list(s) the previous line went to, for "\ No newline at end of file".
    let last: HunkLineOp | null = null;
    while (
      this.i < lines.length &&
      (left.old > 0 || left.new > 0 || lines[this.i].startsWith("\\"))
    ) {
      const l = lines[this.i];
      const ln = this.i + 1;
      this.i++;
      if (l[0] === "\\") {
        if (last === null) this.fail(ln, "'\\ No newline at end of file' with no line before it");
        if (last === " " || last === "-") this.dropNewline(hunk.oldLines, ln);
        if (last === " " || last === "+") this.dropNewline(hunk.newLines, ln);
        last = null;
        continue;
      }
      // A context line whose single space was stripped by an editor: an empty line.
      const isBlankContext = l === "\n" || l === "\r\n";
      const op: HunkLineOp | undefined = isBlankContext
        ? " "
        : l[0] === " " || l[0] === "-" || l[0] === "+"
          ? (l[0] as HunkLineOp)
          : undefined;
      if (op === undefined) {
        this.fail(
          ln,
          `hunk ${hunk.header} ends early: expected ${left.old} more old and ${left.new} more new lines, found ${JSON.stringify(stripEol(l).slice(0, 60))}`,
        );
      }
      const body = isBlankContext ? l : l.slice(1);
      if (op === " " || op === "-") {
        if (left.old === 0)
          this.fail(ln, `hunk ${hunk.header} has more old lines than its header says`);
        left.old--;
        hunk.oldLines.push(body);
      }
      if (op === " " || op === "+") {
        if (left.new === 0)
          this.fail(ln, `hunk ${hunk.header} has more new lines than its header says`);
        left.new--;
        hunk.newLines.push(body);
      }
      last = op;
    }
    return left;
  }

  /** "\ No newline at end of file": the previous line of arr loses its newline. */
  private dropNewline(arr: string[], ln: number): void {
    const k = arr.length - 1;
    if (!arr[k].endsWith("\n")) this.fail(ln, "repeated '\\' marker");
    arr[k] = arr[k].slice(0, -1);
  }
}
