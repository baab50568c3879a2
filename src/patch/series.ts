// Loads a series directory: `series` (ordered patch names), the patches themselves, and the
// optional `files` manifest of our own sources placed into the tree. See README.md for the format.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join, posix, relative, resolve, sep } from "node:path";
import { sha256, toBin } from "./bytes.js";
import { parsePatch, type ParsedPatch } from "./diff.js";
import { PatchError, fsError } from "./errors.js";

export interface SeriesPatch {
  name: string;
  path: string;
  sha256: string;
  parsed: ParsedPatch;
  /** 1-based line in `series`. */
  seriesLine: number;
}

export interface FilesMapping {
  /** As written, left side relative to the repo root, right side relative to the package parent. */
  from: string;
  to: string;
  line: number;
  /** true when the left side is a directory (copy its *.py recursively). */
  isDir: boolean;
}

export interface PlacedFile {
  /** Path relative to the package parent, posix separators ('sglang/srt/kvctl/x.py'). */
  target: string;
  /** Path relative to the repo root ('python/kvctl_worker/x.py'). */
  source: string;
  /** Absolute path of the source. */
  sourceAbs: string;
}

export interface Series {
  /** Directory name, 'sglang-0.5.23'. */
  name: string;
  /** The SGLang version the series targets (from the directory name). */
  version: string;
  dir: string;
  patches: SeriesPatch[];
  mappings: FilesMapping[];
  /** The repo root the mappings' left sides are relative to. */
  repoRoot: string;
}

const SERIES_DIR_RE = /^sglang-(.+)$/;

/** Lists series directories (sglang-*) under a patches/ root, sorted. */
export function listSeries(patchesDir: string): string[] {
  if (!existsSync(patchesDir)) return [];
  try {
    return readdirSync(patchesDir, { withFileTypes: true })
      .filter(
        (d) =>
          d.isDirectory() &&
          SERIES_DIR_RE.test(d.name) &&
          existsSync(join(patchesDir, d.name, "series")),
      )
      .map((d) => d.name)
      .sort();
  } catch {
    return [];
  }
}

/** True when `dir` is itself a series directory (has a `series` file). */
export function isSeriesDir(dir: string): boolean {
  return existsSync(join(dir, "series"));
}

export function seriesVersion(dir: string): string {
  const m = SERIES_DIR_RE.exec(basename(resolve(dir)));
  if (!m) {
    throw new PatchError(
      "usage",
      `series directory ${dir} must be named sglang-<version> (e.g. sglang-0.5.23): the name says which SGLang it targets`,
    );
  }
  return m[1];
}

function readText(path: string, what: string): string {
  try {
    return toBin(readFileSync(path));
  } catch (err) {
    throw fsError(err, `read ${what}`, path);
  }
}

function checkRel(p: string, where: string): string {
  const norm = posix.normalize(p.replace(/\\/g, "/"));
  if (p.startsWith("/") || norm.startsWith("../") || norm === "..") {
    throw new PatchError(
      "malformed",
      `${where}: path '${p}' must be relative and stay inside its root`,
    );
  }
  return norm;
}

export function loadSeries(dir: string, repoRoot: string): Series {
  const abs = resolve(dir);
  const version = seriesVersion(abs);
  const seriesFile = join(abs, "series");
  if (!existsSync(seriesFile)) throw new PatchError("not-found", `no 'series' file in ${abs}`);
  const patches: SeriesPatch[] = [];
  const names = new Set<string>();
  const text = readText(seriesFile, "series file");
  text.split("\n").forEach((raw, k) => {
    const line = raw
      .replace(/\r$/, "")
      .replace(/\s+#.*$/, "")
      .trim();
    if (line === "" || line.startsWith("#")) return;
    const where = `${seriesFile}:${k + 1}`;
    // quilt allows options after the name (e.g. -p1); we only take -p1 patches.
    const [name, ...opts] = line.split(/\s+/);
    if (opts.length > 0 && !(opts.length === 1 && opts[0] === "-p1")) {
      throw new PatchError(
        "malformed",
        `${where}: unsupported options '${opts.join(" ")}' (patches are always -p1)`,
      );
    }
    if (name.includes("/") || name.includes("\\") || name === ".." || name === ".") {
      throw new PatchError(
        "malformed",
        `${where}: '${name}' must be a file name in the series directory`,
      );
    }
    if (names.has(name)) throw new PatchError("malformed", `${where}: '${name}' is listed twice`);
    names.add(name);
    const path = join(abs, name);
    if (!existsSync(path))
      throw new PatchError(
        "malformed",
        `${where}: patch '${name}' is listed but ${path} does not exist`,
      );
    const bytes = (() => {
      try {
        return readFileSync(path);
      } catch (err) {
        throw fsError(err, "read patch", path);
      }
    })();
    patches.push({
      name,
      path,
      sha256: sha256(bytes),
      parsed: parsePatch(toBin(bytes), name),
      seriesLine: k + 1,
    });
  });
  const mappings = loadMappings(join(abs, "files"), repoRoot);
  return { name: basename(abs), version, dir: abs, patches, mappings, repoRoot: resolve(repoRoot) };
}

/** The `files` manifest of a series ('<repo path> -> <sglang path>' per line); none without one. */
function loadMappings(filesPath: string, repoRoot: string): FilesMapping[] {
  const mappings: FilesMapping[] = [];
  if (existsSync(filesPath)) {
    readText(filesPath, "files manifest")
      .split("\n")
      .forEach((raw, k) => {
        const line = raw
          .replace(/\r$/, "")
          .replace(/\s+#.*$/, "")
          .trim();
        if (line === "" || line.startsWith("#")) return;
        const where = `${filesPath}:${k + 1}`;
        const m = /^(\S+)\s*->\s*(\S+)$/.exec(line);
        if (!m)
          throw new PatchError(
            "malformed",
            `${where}: expected '<repo path> -> <sglang path>', got '${line}'`,
          );
        const from = checkRel(m[1], where);
        const to = checkRel(m[2], where);
        if (!(to === "sglang" || to.startsWith("sglang/"))) {
          throw new PatchError(
            "malformed",
            `${where}: target '${m[2]}' must be inside the sglang package ('sglang/...')`,
          );
        }
        const src = join(repoRoot, from);
        if (!existsSync(src))
          throw new PatchError(
            "malformed",
            `${where}: source '${m[1]}' does not exist (looked at ${src})`,
          );
        const isDir = statSync(src).isDirectory();
        if (isDir !== m[1].endsWith("/") || (isDir && !m[2].endsWith("/"))) {
          throw new PatchError(
            "malformed",
            `${where}: '${m[1]}' is a ${isDir ? "directory" : "file"}; write directories with a trailing '/' on both sides ('python/pkg/ -> sglang/srt/pkg/')`,
          );
        }
        mappings.push({ from, to, line: k + 1, isDir });
      });
  }
  return mappings;
}

/** The files manifest's mappings on one line: "a/ -> sglang/a/, b.py -> sglang/b.py". */
export function describeMappings(series: Series): string {
  return series.mappings.map((m) => `${m.from} -> ${m.to}`).join(", ");
}

const SKIP_DIRS = new Set(["__pycache__", "tests", "test", ".pytest_cache", ".mypy_cache"]);
const isTestFile = (n: string) =>
  /^test_.*\.py$/.test(n) || /_test\.py$/.test(n) || n === "conftest.py";

/** Every file the manifest places, in a stable order. Directories contribute their *.py files. */
export function placedFiles(series: Series): PlacedFile[] {
  const out: PlacedFile[] = [];
  const targets = new Map<string, string>();
  const add = (sourceAbs: string, target: string, m: FilesMapping) => {
    const prev = targets.get(target);
    if (prev !== undefined) {
      throw new PatchError(
        "malformed",
        `${join(series.dir, "files")}:${m.line}: ${target} is placed twice (also from ${prev})`,
      );
    }
    const source = relative(series.repoRoot, sourceAbs).split(sep).join("/");
    targets.set(target, source);
    out.push({ target, source, sourceAbs });
  };
  for (const m of series.mappings) {
    const src = join(series.repoRoot, m.from);
    if (!m.isDir) {
      add(src, m.to, m);
      continue;
    }
    const walk = (dir: string, rel: string) => {
      for (const ent of readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
        a.name < b.name ? -1 : 1,
      )) {
        if (ent.isDirectory()) {
          if (!SKIP_DIRS.has(ent.name) && !ent.name.startsWith("."))
            walk(join(dir, ent.name), `${rel}${ent.name}/`);
        } else if (ent.isFile() && ent.name.endsWith(".py") && !isTestFile(ent.name)) {
          add(join(dir, ent.name), posix.join(m.to, `${rel}${ent.name}`), m);
        }
      }
    };
    walk(src, "");
  }
  return out;
}
