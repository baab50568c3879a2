// The record an apply leaves in the tree: <package parent>/sglang/.kvctl-patches.json, plus
// byte-exact copies of every original file it changed or deleted under sglang/.kvctl-orig/
// (same relative paths). Revert needs only these two, never the series.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { PatchError, fsError } from "./errors.js";

export const STATE_FILE = ".kvctl-patches.json";
export const BACKUP_DIR = ".kvctl-orig";
export const LOCK_FILE = ".kvctl-patches.lock";

const FileRecord = z.object({
  /** Relative to the package parent: 'sglang/srt/mem_cache/radix_cache.py'. */
  path: z.string(),
  action: z.enum(["modify", "create", "delete"]),
  originalSha256: z.string().nullable(),
  patchedSha256: z.string().nullable(),
  /** Backup of the original, relative to the package parent ('sglang/.kvctl-orig/srt/...'), null for created files. */
  backup: z.string().nullable(),
  /** Permission bits of the original (restored with it), null for created files. */
  originalMode: z.number().nullable(),
  /** Patches (by name) that touched the file, in order. */
  patches: z.array(z.string()),
});

const PatchRecord = z.object({
  name: z.string(),
  sha256: z.string(),
  files: z.array(z.string()),
  hunks: z.number(),
});

const PlacedRecord = z.object({
  path: z.string(),
  source: z.string(),
  sha256: z.string(),
});

export const PatchStateSchema = z.object({
  format: z.literal(1),
  tool: z.literal("kvctl"),
  kvctlVersion: z.string(),
  /** 'applying' only while an apply is being written; found later, it means that apply was interrupted. */
  status: z.enum(["applying", "applied"]),
  series: z.string(),
  seriesDir: z.string(),
  sglangVersion: z.string(),
  appliedAt: z.string(),
  patches: z.array(PatchRecord),
  files: z.array(FileRecord),
  placed: z.array(PlacedRecord),
  /** Directories the apply created (relative to the package parent), deepest last. */
  createdDirs: z.array(z.string()),
});

export type PatchState = z.infer<typeof PatchStateSchema>;
export type FileRecord = z.infer<typeof FileRecord>;
export type PlacedRecord = z.infer<typeof PlacedRecord>;

export const statePath = (parent: string) => join(parent, "sglang", STATE_FILE);
export const backupRel = (path: string) => `sglang/${BACKUP_DIR}/${path.replace(/^sglang\//, "")}`;

export function readState(parent: string): PatchState | null {
  const p = statePath(parent);
  if (!existsSync(p)) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(p, "utf8"));
  } catch (err) {
    if (err instanceof SyntaxError)
      throw new PatchError(
        "state",
        `state file ${p} is not valid JSON (${err.message}); restore it or reinstall SGLang`,
      );
    throw fsError(err, "read state file", p);
  }
  const r = PatchStateSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new PatchError(
      "state",
      `state file ${p} is not a kvctl patch state (${issue.path.join(".")}: ${issue.message})`,
    );
  }
  return r.data;
}

export const serializeState = (s: PatchState): Buffer =>
  Buffer.from(`${JSON.stringify(s, null, 2)}\n`, "utf8");
