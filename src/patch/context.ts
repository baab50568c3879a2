// Shared steps of the four operations: locate the tree, refuse a version without a series,
// load the series and the recorded state, and read originals (from backups once applied).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { sha256, toBin } from "./bytes.js";
import { PatchError, fsError } from "./errors.js";
import { locateSglang, type SglangTree } from "./locate.js";
import { defaultPatchesDir, kvctlRoot } from "./repo.js";
import { isSeriesDir, listSeries, loadSeries, seriesVersion, type Series } from "./series.js";
import { readState, type PatchState } from "./state.js";

export interface CommonOptions {
  /** A series directory (sglang-<version>/) or a patches/ root holding several; default: kvctl's patches/. */
  series?: string;
  /** Override the detected SGLang version. */
  sglangVersion?: string;
  /** Root the `files` manifest's left sides are relative to; default: the kvctl package root. */
  repoRoot?: string;
}

export interface TreeInfo {
  path: string;
  parent: string;
  pkg: string;
  layout: SglangTree["layout"];
  version: string | null;
  versionSource: string | null;
  warnings: string[];
}

export const treeInfo = (t: SglangTree): TreeInfo => ({
  path: t.input,
  parent: t.parent,
  pkg: t.pkg,
  layout: t.layout,
  version: t.version,
  versionSource: t.versionSource,
  warnings: t.versionWarnings,
});

function available(root: string): string {
  const all = listSeries(root);
  return all.length
    ? `series available in ${root}: ${all.join(", ")}`
    : `no series exist in ${root}`;
}

/** The series directory for the tree's version; throws PatchError('version') when there is none. */
export function resolveSeriesDir(tree: SglangTree, opts: CommonOptions): string {
  const where = `${tree.pkg}`;
  if (tree.version === null) {
    throw new PatchError(
      "version",
      `cannot tell which SGLang version is at ${where}: no version in sglang/_version.py, sglang/version.py, an sglang-*.dist-info/METADATA or python/pyproject.toml; pass --sglang-version X`,
    );
  }
  const found = `SGLang at ${where} is ${tree.version} (from ${tree.versionSource})`;
  const given = opts.series ? resolve(opts.series) : defaultPatchesDir();
  if (!existsSync(given)) throw new PatchError("not-found", `series path not found: ${given}`);
  if (isSeriesDir(given)) {
    const v = seriesVersion(given);
    if (v !== tree.version) {
      throw new PatchError(
        "version",
        `version mismatch: series ${given} targets SGLang ${v}, but ${found}. ${available(dirname(given))}. Nothing was changed. ` +
          `Install SGLang ${v}, or pass --sglang-version if the detected version is wrong.`,
      );
    }
    return given;
  }
  const dir = join(given, `sglang-${tree.version}`);
  if (!isSeriesDir(dir)) {
    throw new PatchError(
      "version",
      `version mismatch: ${found}, but there is no patch series sglang-${tree.version}; ${available(given)}. Nothing was changed. ` +
        `Install a supported SGLang release, or pass --sglang-version if the detected version is wrong.`,
    );
  }
  return dir;
}

export interface Context {
  tree: SglangTree;
  series: Series;
  state: PatchState | null;
}

export function loadContext(path: string, opts: CommonOptions): Context {
  const tree = locateSglang(path, { sglangVersion: opts.sglangVersion });
  const dir = resolveSeriesDir(tree, opts);
  const series = loadSeries(dir, opts.repoRoot ?? kvctlRoot());
  const state = readState(tree.parent);
  return { tree, series, state };
}

export function readRel(parent: string, rel: string): Buffer | null {
  const p = join(parent, rel);
  if (!existsSync(p)) return null;
  try {
    return readFileSync(p);
  } catch (err) {
    throw fsError(err, "read", p);
  }
}

/** Reads ORIGINAL contents: recorded files from their backups (verified), others from disk. */
export function originalReader(
  parent: string,
  state: PatchState | null,
): (rel: string) => string | null {
  const files = new Map(state?.files.map((f) => [f.path, f]) ?? []);
  const placed = new Set(state?.placed.map((p) => p.path) ?? []);
  return (rel) => {
    const rec = files.get(rel);
    if (rec) {
      if (rec.originalSha256 === null) return null;
      const b = rec.backup ? readRel(parent, rec.backup) : null;
      if (b === null || sha256(b) !== rec.originalSha256) {
        throw new PatchError(
          "state",
          `the backup of ${rel} (${rec.backup ?? "none"}) is missing or does not match the recorded original sha256; cannot recover the original. Reinstall SGLang to start clean.`,
        );
      }
      return toBin(b);
    }
    if (placed.has(rel)) return null;
    const b = readRel(parent, rel);
    return b === null ? null : toBin(b);
  };
}

export interface DriftEntry {
  path: string;
  kind: "patched" | "placed";
  /** modified: differs from what apply wrote; missing: deleted since; reappeared: a file apply deleted exists again. */
  problem: "modified" | "missing" | "reappeared";
}

/** Files of the applied tree whose bytes differ from what apply wrote (hand edits). */
export function treeDrift(parent: string, state: PatchState): DriftEntry[] {
  const out: DriftEntry[] = [];
  for (const f of state.files) {
    const b = readRel(parent, f.path);
    const have = b === null ? null : sha256(b);
    if (have === f.patchedSha256) continue;
    if (state.status === "applying" && have === f.originalSha256) continue;
    out.push({
      path: f.path,
      kind: "patched",
      problem: have === null ? "missing" : f.patchedSha256 === null ? "reappeared" : "modified",
    });
  }
  for (const p of state.placed) {
    const b = readRel(parent, p.path);
    if (b === null) {
      if (state.status !== "applying")
        out.push({ path: p.path, kind: "placed", problem: "missing" });
    } else if (sha256(b) !== p.sha256)
      out.push({ path: p.path, kind: "placed", problem: "modified" });
  }
  return out;
}

export function describeDrift(d: DriftEntry[]): string {
  return d
    .map(
      (e) =>
        `${e.path} (${e.kind === "placed" ? "placed file" : "patched file"} ${e.problem} since apply)`,
    )
    .join(", ");
}
