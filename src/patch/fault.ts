// Fault injection for the crash-consistency test: every filesystem mutation of a patch run is a
// numbered step, and KVCTL_PATCH_KILL_AT=N makes the process SIGKILL itself just before step N,
// as `kill -9` at that moment would. Unset (the normal case) it only counts.
let steps = 0;

/** Marks the next mutation; dies by SIGKILL first when it is the one KVCTL_PATCH_KILL_AT names. */
export function step(): void {
  steps++;
  const at = process.env.KVCTL_PATCH_KILL_AT;
  if (at !== undefined && Number(at) === steps) process.kill(process.pid, "SIGKILL");
}

/** Mutation steps this process has made so far (a test counts a run's steps with it). */
export const stepCount = (): number => steps;
