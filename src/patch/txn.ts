// All-or-nothing writes that survive a kill. A run first writes its journal (journal.ts), then
// writes each file through a temp file + fsync + rename (atomic.ts). An error rolls every write
// back from memory in reverse order and drops the journal; a kill leaves the journal, and the next
// apply, revert or status calls recoverInterrupted under the tree lock: when every journaled path
// already holds its new bytes the run is finished (its directory cleanup redone), otherwise every
// path gets its old bytes and mode back and the directories the run created are removed. Either
// way the temp files are swept and the journal removed last, so a kill during recovery is
// recovered the same way.
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
} from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { removeTemps, unlinkStep, writeAtomic } from "./atomic.js";
import { sha256 } from "./bytes.js";
import { readRel } from "./context.js";
import { cleanupDirs, removeEmptyTree } from "./dirs.js";
import { PatchError, fsError } from "./errors.js";
import { step } from "./fault.js";
import {
  JOURNAL_FILE,
  journalPath,
  readJournal,
  removeJournal,
  writeJournal,
  type JournalEntry,
} from "./journal.js";

export interface WriteOp {
  /** Absolute path, inside the package parent. */
  path: string;
  /** New bytes, or null to delete the file. */
  content: Buffer | null;
  /** Mode for a new file (an existing file keeps its own). */
  mode?: number;
}

export interface TxnOptions {
  /** Test hook: throw after this many successful writes, as a failing disk would. */
  failAfterWrites?: number;
  /** Directories (relative to the package parent) to remove, if empty, once every write is done. */
  cleanupDirs?: string[];
  /** Trees of empty directories (relative to the package parent) to remove once every write is done. */
  pruneDirs?: string[];
}

interface Done {
  op: WriteOp;
  before: Buffer | null;
  mode: number | null;
}

const relPath = (parent: string, abs: string) => relative(parent, abs).split(sep).join("/");

/** Fails early (before anything is written) on paths we could not write. */
export function preflight(ops: WriteOp[]): void {
  for (const op of ops) {
    let dir = dirname(op.path);
    while (!existsSync(dir)) dir = dirname(dir);
    try {
      accessSync(dir, constants.W_OK);
    } catch (err) {
      throw fsError(err, "write into", dir);
    }
    if (existsSync(op.path)) {
      const st = lstatSync(op.path);
      if (!st.isFile())
        throw new PatchError(
          "io",
          `${op.path} is not a regular file (${st.isDirectory() ? "a directory" : "a link or special file"})`,
        );
    }
  }
}

/** Directories (relative, shallowest first) that writing `ops` creates. */
function dirsToCreate(parent: string, ops: WriteOp[]): string[] {
  const out = new Set<string>();
  for (const op of ops) {
    if (op.content === null) continue;
    for (let d = dirname(op.path); !existsSync(d); d = dirname(d)) out.add(relPath(parent, d));
  }
  return [...out].sort((a, b) => a.length - b.length);
}

function finish(parent: string, opts: { cleanupDirs?: string[]; pruneDirs?: string[] }): void {
  cleanupDirs(parent, opts.cleanupDirs ?? []);
  for (const d of opts.pruneDirs ?? []) removeEmptyTree(join(parent, d));
}

function sweepTemps(parent: string, paths: string[]): void {
  for (const dir of new Set(paths.map((p) => dirname(join(parent, p))))) removeTemps(dir);
}

/**
 * Writes every op or none, journaled first so that a kill at any moment is finished or undone by
 * the next run (recoverInterrupted). `parent` is the package parent every op lies under.
 */
export function commitWrites(
  parent: string,
  run: "apply" | "revert",
  ops: WriteOp[],
  opts: TxnOptions = {},
): void {
  preflight(ops);
  const entries = journalEntries(parent, ops);
  const createdDirs = dirsToCreate(parent, ops);
  writeJournal(parent, {
    format: 1,
    tool: "kvctl",
    run,
    pid: process.pid,
    startedAt: new Date().toISOString(),
    entries: [...entries.values()],
    createdDirs,
    cleanupDirs: opts.cleanupDirs ?? [],
    pruneDirs: opts.pruneDirs ?? [],
  });
  const done: Done[] = [];
  try {
    for (const op of ops) {
      writeOp(op, done);
      if (opts.failAfterWrites !== undefined && done.length >= opts.failAfterWrites) {
        throw new PatchError("io", `simulated failure after ${done.length} writes (test hook)`);
      }
    }
  } catch (err) {
    const failures = rollBack(parent, done, createdDirs);
    const base = err instanceof PatchError ? err : fsError(err, "write", "(unknown)");
    let tail: string;
    if (failures.length === 0) {
      sweepTemps(parent, [...entries.keys()]);
      removeJournal(parent);
      tail = `; nothing was changed (${done.length} write${done.length === 1 ? "" : "s"} rolled back)`;
    } else {
      // The journal stays: the next apply, revert or status retries the rollback.
      tail = `; ROLLBACK FAILED for ${failures.length} file(s) (the next apply, revert or status retries it from the journal): ${failures.join("; ")}`;
    }
    throw new PatchError(base.code, `${base.message}${tail}`);
  }
  finish(parent, opts);
  removeJournal(parent);
}

/** One journal entry per path: its bytes and mode before the run, its hash after. */
function journalEntries(parent: string, ops: WriteOp[]): Map<string, JournalEntry> {
  const entries = new Map<string, JournalEntry>();
  for (const op of ops) {
    const rel = relPath(parent, op.path);
    let e = entries.get(rel);
    if (!e) {
      const exists = existsSync(op.path);
      e = {
        path: rel,
        before: exists ? readFileSync(op.path).toString("base64") : null,
        mode: exists ? lstatSync(op.path).mode & 0o7777 : null,
        afterSha256: null,
      };
      entries.set(rel, e);
    }
    e.afterSha256 = op.content === null ? null : sha256(op.content);
  }
  return entries;
}

/** Performs one op, first noting in done what it replaces. */
function writeOp(op: WriteOp, done: Done[]): void {
  const exists = existsSync(op.path);
  const before = exists ? readFileSync(op.path) : null;
  const mode = exists ? lstatSync(op.path).mode & 0o7777 : null;
  done.push({ op, before, mode });
  if (op.content === null) {
    if (!exists) return;
    try {
      unlinkStep(op.path);
    } catch (err) {
      throw fsError(err, "delete", op.path);
    }
    return;
  }
  const dir = dirname(op.path);
  if (!existsSync(dir)) {
    try {
      step();
      mkdirSync(dir, { recursive: true });
    } catch (err) {
      throw fsError(err, "create directory", dir);
    }
  }
  try {
    writeAtomic(op.path, op.content, mode ?? op.mode ?? 0o644);
  } catch (err) {
    throw fsError(err, "write", op.path);
  }
}

/** Undoes the ops done (last first) and removes the directories the run created; returns what failed. */
function rollBack(parent: string, done: Done[], createdDirs: string[]): string[] {
  const failures: string[] = [];
  for (const d of done.reverse()) {
    try {
      if (d.before === null) {
        if (existsSync(d.op.path)) unlinkStep(d.op.path);
      } else {
        writeAtomic(d.op.path, d.before, d.mode ?? 0o644);
      }
    } catch (e) {
      failures.push(`${d.op.path}: ${(e as Error).message}`);
    }
  }
  for (const dir of [...createdDirs].reverse()) {
    try {
      step();
      rmdirSync(join(parent, dir));
    } catch {
      // not empty or already gone
    }
  }
  return failures;
}

/**
 * Finishes or undoes a run that was killed mid-write (its journal is still there); call under the
 * tree lock. Returns what it did, or null when there was nothing to recover.
 */
export function recoverInterrupted(parent: string): string | null {
  const j = readJournal(parent);
  // A kill while the journal itself was being written leaves only its temp file.
  removeTemps(join(parent, "sglang"));
  if (!j) return null;
  const current = (e: JournalEntry) => {
    const b = readRel(parent, e.path);
    return b === null ? null : sha256(b);
  };
  const complete = j.entries.every((e) => current(e) === e.afterSha256);
  let restored = 0;
  try {
    // Temp files first: they would keep the directories to remove from being empty.
    sweepTemps(
      parent,
      j.entries.map((e) => e.path),
    );
    if (complete) finish(parent, j);
    else {
      for (const e of [...j.entries].reverse()) {
        const abs = join(parent, e.path);
        const want = e.before === null ? null : Buffer.from(e.before, "base64");
        const have = readRel(parent, e.path);
        if (want === null) {
          if (have !== null) {
            unlinkStep(abs);
            restored++;
          }
          continue;
        }
        if (have === null || !have.equals(want)) {
          if (!existsSync(dirname(abs))) {
            step();
            mkdirSync(dirname(abs), { recursive: true });
          }
          writeAtomic(abs, want, e.mode ?? 0o644);
          restored++;
        } else if (e.mode !== null && (lstatSync(abs).mode & 0o7777) !== e.mode) {
          step();
          chmodSync(abs, e.mode);
        }
      }
      cleanupDirs(parent, j.createdDirs);
    }
  } catch (err) {
    const e = fsError(err, "recover", parent);
    throw new PatchError(
      e.code,
      `cannot recover the interrupted ${j.run} (pid ${j.pid}): ${e.message}; nothing else was changed`,
    );
  }
  removeJournal(parent);
  return complete
    ? `recovered an interrupted ${j.run} (pid ${j.pid}, started ${j.startedAt}): every write had landed; finished it`
    : `recovered an interrupted ${j.run} (pid ${j.pid}, started ${j.startedAt}): rolled it back (${restored} file${restored === 1 ? "" : "s"} restored to their bytes before it)`;
}

/** True when a run was killed mid-write here (its journal, or the journal's temp file, is left). */
export function interruptedRun(parent: string): boolean {
  const pkg = join(parent, "sglang");
  return (
    existsSync(journalPath(parent)) ||
    (existsSync(pkg) && readdirSync(pkg).some((n) => n.startsWith(`.${JOURNAL_FILE}.kvctl-tmp-`)))
  );
}
