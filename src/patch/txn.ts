// All-or-nothing writes: each file is written to a temp file beside it and renamed into place;
// the previous bytes and mode of every path are kept in memory, and any error rolls every write
// back in reverse order (directories we created are removed again).
import { accessSync, chmodSync, constants, existsSync, lstatSync, mkdirSync, readFileSync, renameSync, rmdirSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname, join, basename } from "node:path";
import { PatchError, fsError } from "./errors.js";

export interface WriteOp {
  /** Absolute path. */
  path: string;
  /** New bytes, or null to delete the file. */
  content: Buffer | null;
  /** Mode for a new file (an existing file keeps its own). */
  mode?: number;
}

export interface TxnOptions {
  /** Test hook: throw after this many successful writes, as a crash or a failing disk would. */
  failAfterWrites?: number;
}

interface Done {
  op: WriteOp;
  before: Buffer | null;
  mode: number | null;
}

function writeAtomic(path: string, content: Buffer, mode: number): void {
  const tmp = join(dirname(path), `.${basename(path)}.kvctl-tmp-${process.pid}`);
  try {
    writeFileSync(tmp, content, { mode });
    chmodSync(tmp, mode);
    renameSync(tmp, path);
  } catch (err) {
    try {
      if (existsSync(tmp)) unlinkSync(tmp);
    } catch {
      // best effort
    }
    throw err;
  }
}

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
      if (!st.isFile()) throw new PatchError("io", `${op.path} is not a regular file (${st.isDirectory() ? "a directory" : "a link or special file"})`);
    }
  }
}

/** Writes every op or none (directories it created are removed again on rollback). */
export function commitWrites(ops: WriteOp[], opts: TxnOptions = {}): void {
  preflight(ops);
  const done: Done[] = [];
  const createdDirs: string[] = [];
  try {
    for (const op of ops) {
      const exists = existsSync(op.path);
      const before = exists ? readFileSync(op.path) : null;
      const mode = exists ? lstatSync(op.path).mode & 0o7777 : null;
      done.push({ op, before, mode });
      if (op.content === null) {
        if (exists) {
          try {
            unlinkSync(op.path);
          } catch (err) {
            throw fsError(err, "delete", op.path);
          }
        }
      } else {
        const dir = dirname(op.path);
        if (!existsSync(dir)) {
          try {
            const first = mkdirSync(dir, { recursive: true });
            if (first) {
              // Every level from `first` down to `dir` is new.
              const levels: string[] = [];
              for (let d = dir; d.length >= first.length; d = dirname(d)) levels.unshift(d);
              createdDirs.push(...levels);
            }
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
      if (opts.failAfterWrites !== undefined && done.length >= opts.failAfterWrites) {
        throw new PatchError("io", `simulated failure after ${done.length} writes (test hook)`);
      }
    }
  } catch (err) {
    const failures: string[] = [];
    for (const d of done.reverse()) {
      try {
        if (d.before === null) {
          if (existsSync(d.op.path)) unlinkSync(d.op.path);
        } else {
          writeAtomic(d.op.path, d.before, d.mode ?? 0o644);
        }
      } catch (e) {
        failures.push(`${d.op.path}: ${(e as Error).message}`);
      }
    }
    for (const dir of createdDirs.reverse()) {
      try {
        rmdirSync(dir);
      } catch {
        // not empty or already gone
      }
    }
    const base = err instanceof PatchError ? err : fsError(err, "write", "(unknown)");
    const tail =
      failures.length === 0
        ? `; nothing was changed (${done.length} write${done.length === 1 ? "" : "s"} rolled back)`
        : `; ROLLBACK FAILED for ${failures.length} file(s), the tree may be inconsistent: ${failures.join("; ")}`;
    throw new PatchError(base.code, `${base.message}${tail}`);
  }
}
