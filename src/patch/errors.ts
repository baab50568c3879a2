// Every failure of the patch tooling is a PatchError with a code; the CLI maps codes to exit
// statuses (usage/version problems: 2, everything else: 1) and prints the message as is, so each
// message must say what was wrong, where, and what to do about it.
export type PatchErrorCode =
  | "usage" // bad arguments
  | "not-found" // path does not exist / no sglang package there
  | "version" // SGLang version unknown or no series for it
  | "malformed" // series/patch/manifest syntax error (with file and line)
  | "conflict" // a hunk does not apply, a placed file would overwrite SGLang's own
  | "drift" // the tree was edited by hand since apply
  | "state" // the state file or backups are missing, corrupt or from an interrupted run
  | "permission" // EACCES/EPERM/EROFS
  | "locked" // another kvctl patch run holds the tree
  | "io"; // any other filesystem error

export class PatchError extends Error {
  readonly code: PatchErrorCode;
  constructor(code: PatchErrorCode, message: string) {
    super(message);
    this.name = "PatchError";
    this.code = code;
  }
}

/** Exit status the CLI uses for an error code: 2 for usage and version errors, 1 otherwise. */
export function exitCodeFor(code: PatchErrorCode): number {
  return code === "usage" || code === "version" || code === "not-found" ? 2 : 1;
}

/** Turns a Node fs error into a PatchError that names the path and the operation. */
export function fsError(err: unknown, what: string, path: string): PatchError {
  if (err instanceof PatchError) return err;
  const e = err as NodeJS.ErrnoException;
  const code = e?.code;
  if (code === "EACCES" || code === "EPERM" || code === "EROFS") {
    return new PatchError(
      "permission",
      `permission denied: cannot ${what} ${path} (${code}); run as a user that can write the SGLang tree, or patch a copy you own`,
    );
  }
  if (code === "ENOENT")
    return new PatchError("not-found", `cannot ${what} ${path}: no such file or directory`);
  return new PatchError("io", `cannot ${what} ${path}: ${e?.message ?? String(err)}`);
}
