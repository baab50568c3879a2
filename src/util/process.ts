// Child-process helpers for the local servers kvctl starts.
import type { ChildProcess } from "node:child_process";

/** Resolves when `child` has exited; after `killAfterMs` it is sent SIGKILL first. */
export function waitExit(child: ChildProcess, killAfterMs?: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t =
      killAfterMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), killAfterMs);
    child.once("exit", () => {
      if (t) clearTimeout(t);
      resolve();
    });
  });
}
