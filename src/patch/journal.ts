// The journal a patch run writes before it touches the tree (sglang/.kvctl-patches.journal): for
// every path it will write, the bytes and mode the path had before and the sha256 it will have
// after; the directories its writes create; the empty directories to remove once it is done.
// Present only while a run is writing (or after one was killed), so its presence alone says
// "interrupted" to the next run, which then finishes or undoes it (txn.ts, recoverInterrupted).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { syncDir, unlinkStep, writeAtomic } from "./atomic.js";
import { PatchError, fsError } from "./errors.js";

export const JOURNAL_FILE = ".kvctl-patches.journal";

const JournalEntry = z.object({
  /** Relative to the package parent. */
  path: z.string(),
  /** Base64 bytes before the run; null: the path did not exist. */
  before: z.string().nullable(),
  mode: z.number().nullable(),
  /** sha256 of the bytes the run leaves there; null: the run deletes the path. */
  afterSha256: z.string().nullable(),
});

export const JournalSchema = z.object({
  format: z.literal(1),
  tool: z.literal("kvctl"),
  run: z.enum(["apply", "revert"]),
  pid: z.number(),
  startedAt: z.string(),
  entries: z.array(JournalEntry),
  /** Directories (relative to the package parent) the writes create: removed again on rollback. */
  createdDirs: z.array(z.string()),
  /** Directories to remove when empty once every write is done (redone when a run is finished). */
  cleanupDirs: z.array(z.string()),
  /** Trees of empty directories to remove once every write is done. */
  pruneDirs: z.array(z.string()),
});

export type Journal = z.infer<typeof JournalSchema>;
export type JournalEntry = z.infer<typeof JournalEntry>;

export const journalPath = (parent: string): string => join(parent, "sglang", JOURNAL_FILE);

export function writeJournal(parent: string, j: Journal): void {
  const p = journalPath(parent);
  try {
    writeAtomic(p, Buffer.from(JSON.stringify(j), "utf8"), 0o644);
    syncDir(join(parent, "sglang"));
  } catch (err) {
    throw fsError(err, "write journal", p);
  }
}

export function readJournal(parent: string): Journal | null {
  const p = journalPath(parent);
  if (!existsSync(p)) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(p, "utf8"));
  } catch (err) {
    if (err instanceof SyntaxError)
      throw new PatchError(
        "state",
        `journal ${p} is not valid JSON (${err.message}); reinstall SGLang to start clean`,
      );
    throw fsError(err, "read journal", p);
  }
  const r = JournalSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new PatchError(
      "state",
      `journal ${p} is not a kvctl patch journal (${issue.path.join(".")}: ${issue.message})`,
    );
  }
  return r.data;
}

export function removeJournal(parent: string): void {
  const p = journalPath(parent);
  try {
    unlinkStep(p);
    syncDir(join(parent, "sglang"));
  } catch (err) {
    throw fsError(err, "remove journal", p);
  }
}
