// Single-file writes that a kill cannot tear: the bytes go to a temp file beside the target
// (.<name>.kvctl-tmp-<pid>), are fsynced, then renamed over it. Every mutation is a fault step.
import {
  chmodSync,
  closeSync,
  fsyncSync,
  openSync,
  readdirSync,
  renameSync,
  unlinkSync,
  writeSync,
  existsSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { step } from "./fault.js";

const TEMP_NAME = /^\..+\.kvctl-tmp-\d+$/;

export const tempPath = (path: string): string =>
  join(dirname(path), `.${basename(path)}.kvctl-tmp-${process.pid}`);

function writeAll(fd: number, buf: Buffer): void {
  for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off);
}

export function writeAtomic(path: string, content: Buffer, mode: number): void {
  const tmp = tempPath(path);
  try {
    step();
    const fd = openSync(tmp, "w", mode);
    try {
      const half = content.length >> 1;
      writeAll(fd, content.subarray(0, half));
      step(); // a kill here leaves a torn temp file behind
      writeAll(fd, content.subarray(half));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    chmodSync(tmp, mode);
    step();
    renameSync(tmp, path);
  } catch (err) {
    try {
      if (existsSync(tmp)) unlinkSync(tmp);
    } catch {
      // best effort; recovery sweeps temp files too
    }
    throw err;
  }
}

export function unlinkStep(path: string): void {
  step();
  unlinkSync(path);
}

/** Flushes a directory entry (a rename or unlink in it) to disk. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Removes temp files an interrupted write left in `dir`; returns how many. */
export function removeTemps(dir: string): number {
  if (!existsSync(dir)) return 0;
  let n = 0;
  for (const name of readdirSync(dir)) {
    if (!TEMP_NAME.test(name)) continue;
    unlinkStep(join(dir, name));
    n++;
  }
  return n;
}
