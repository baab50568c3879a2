// One kvctl patch run per tree at a time: sglang/.kvctl-patches.lock holds the owner's pid.
import { closeSync, existsSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { PatchError, fsError } from "./errors.js";
import { LOCK_FILE } from "./state.js";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** True when a lock file is left by a run that is no longer alive (it was killed). */
export function staleLock(pkgDir: string): boolean {
  const path = join(pkgDir, LOCK_FILE);
  if (!existsSync(path)) return false;
  const pid = Number(readFileSync(path, "utf8").trim());
  return !(Number.isInteger(pid) && pid > 0 && alive(pid));
}

export function withLock<T>(pkgDir: string, fn: () => T): T {
  const path = join(pkgDir, LOCK_FILE);
  let fd: number | undefined;
  for (let attempt = 0; attempt < 2 && fd === undefined; attempt++) {
    try {
      fd = openSync(path, "wx");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST")
        throw fsError(err, "create lock file", path);
      const pid = Number(readFileSync(path, "utf8").trim());
      if (Number.isInteger(pid) && pid > 0 && alive(pid) && pid !== process.pid) {
        throw new PatchError(
          "locked",
          `another kvctl patch run (pid ${pid}) is working on this tree (${path}); wait for it to finish`,
        );
      }
      unlinkSync(path); // stale lock from a crashed run
    }
  }
  if (fd === undefined) throw new PatchError("locked", `cannot take the lock ${path}`);
  try {
    writeSync(fd, `${process.pid}\n`);
    closeSync(fd);
    return fn();
  } finally {
    try {
      unlinkSync(path);
    } catch {
      // already gone
    }
  }
}
