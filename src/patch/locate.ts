// Finds the SGLang tree a user points at and its version. Accepted paths: a git checkout root
// (python/sglang/ inside), its python/ dir, site-packages (sglang/ inside), or the sglang/ package
// dir itself. Everything else works on the "package parent": the directory that contains sglang/.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { PatchError } from "./errors.js";

export type TreeLayout = "git-checkout" | "site-packages" | "package-dir";

export interface SglangTree {
  /** The path as given (resolved). */
  input: string;
  /** Directory that contains sglang/ (where 'a/sglang/...' paths are rooted). */
  parent: string;
  /** The sglang package dir. */
  pkg: string;
  layout: TreeLayout;
  /** Detected (or overridden) version, or null when nothing says. */
  version: string | null;
  /** Where the version came from ('sglang/_version.py', 'sglang-0.5.23.dist-info/METADATA', '--sglang-version', ...). */
  versionSource: string | null;
  /** Other sources that disagree with the chosen one. */
  versionWarnings: string[];
}

const isDir = (p: string) => {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
};

const looksLikeSglang = (p: string) =>
  isDir(p) &&
  (existsSync(join(p, "__init__.py")) ||
    existsSync(join(p, "srt")) ||
    existsSync(join(p, "_version.py")));

const VERSION_LITERAL =
  /^(?:__version__|version)\s*=\s*(?:[A-Za-z_][A-Za-z_0-9]*\s*=\s*)*['"]([^'"]+)['"]/m;

function fromPyFile(path: string): string | null {
  if (!existsSync(path)) return null;
  const m = VERSION_LITERAL.exec(readFileSync(path, "utf8"));
  return m ? m[1] : null;
}

function fromDistInfo(
  parent: string,
): { version: string; source: string } | { ambiguous: string[] } | null {
  let entries: string[];
  try {
    entries = readdirSync(parent).filter((n) => /^sglang-[^/]+\.dist-info$/.test(n));
  } catch {
    return null;
  }
  if (entries.length === 0) return null;
  if (entries.length > 1) return { ambiguous: entries };
  const meta = join(parent, entries[0], "METADATA");
  if (existsSync(meta)) {
    const m = /^Version:\s*(\S+)\s*$/m.exec(readFileSync(meta, "utf8"));
    if (m) return { version: m[1], source: `${entries[0]}/METADATA` };
  }
  const fromName = /^sglang-(.+)\.dist-info$/.exec(entries[0]);
  return fromName ? { version: fromName[1], source: entries[0] } : null;
}

function fromPyproject(parent: string): string | null {
  const path = join(parent, "pyproject.toml");
  if (!existsSync(path)) return null;
  const text = readFileSync(path, "utf8");
  // The version key of the [project] table (not of [tool.*] tables).
  const start = text.search(/^\[project\]\s*$/m);
  if (start < 0) return null;
  const rest = text.slice(start).split("\n").slice(1);
  for (const line of rest) {
    if (/^\s*\[/.test(line)) break;
    const m = /^\s*version\s*=\s*["']([^"']+)["']/.exec(line);
    if (m) return m[1];
  }
  return null;
}

function fromGitTag(dir: string): string | null {
  const r = spawnSync("git", ["-C", dir, "describe", "--tags", "--exact-match", "HEAD"], {
    encoding: "utf8",
    timeout: 10_000,
  });
  if (r.status !== 0 || !r.stdout) return null;
  const tag = r.stdout.trim();
  const m = /^v?(\d+\.\d+.*)$/.exec(tag);
  return m ? m[1] : null;
}

/** Finds the sglang package under `path` and detects its version. Throws PatchError('not-found'). */
export function locateSglang(path: string, opts: { sglangVersion?: string } = {}): SglangTree {
  const input = resolve(path);
  const parent = packageParent(input);
  const pkg = join(parent, "sglang");
  const di = fromDistInfo(parent);
  const isCheckout =
    basename(parent) === "python" &&
    (existsSync(join(parent, "pyproject.toml")) || existsSync(join(dirname(parent), ".git")));
  const layout: TreeLayout = isCheckout
    ? "git-checkout"
    : di !== null || /site-packages|dist-packages/.test(parent)
      ? "site-packages"
      : "package-dir";
  const warnings: string[] = [];
  const found = versionSources(parent, pkg, di, isCheckout, warnings);
  const { version, versionSource } = pickVersion(found, opts.sglangVersion, warnings);
  return { input, parent, pkg, layout, version, versionSource, versionWarnings: warnings };
}

/** The folder holding the sglang package the input names (a checkout, python/, site-packages, the package). */
function packageParent(input: string): string {
  if (!existsSync(input)) throw new PatchError("not-found", `path not found: ${input}`);
  if (!isDir(input))
    throw new PatchError(
      "not-found",
      `${input} is not a directory (give a git checkout, site-packages, or the sglang/ package dir)`,
    );
  if (basename(input) === "sglang" && looksLikeSglang(input)) return dirname(input);
  if (looksLikeSglang(join(input, "sglang"))) return input;
  if (looksLikeSglang(join(input, "python", "sglang"))) return join(input, "python");
  throw new PatchError(
    "not-found",
    `no sglang package found at ${input} (looked for ${join(input, "sglang")}/, ${join(input, "python", "sglang")}/ and ${input} itself); ` +
      `give a git checkout of SGLang, its python/ dir, a site-packages dir, or the sglang/ package dir`,
  );
}

/** Every version source we can read, in order of trust. */
function versionSources(
  parent: string,
  pkg: string,
  di: ReturnType<typeof fromDistInfo>,
  isCheckout: boolean,
  warnings: string[],
): { version: string; source: string }[] {
  const found: { version: string; source: string }[] = [];
  const v1 = fromPyFile(join(pkg, "_version.py"));
  if (v1) found.push({ version: v1, source: "sglang/_version.py" });
  const v2 = fromPyFile(join(pkg, "version.py"));
  if (v2) found.push({ version: v2, source: "sglang/version.py" });
  if (di && "version" in di) found.push(di);
  else if (di && "ambiguous" in di)
    warnings.push(`several sglang dist-info dirs in ${parent}: ${di.ambiguous.join(", ")}`);
  const v3 = fromPyproject(parent);
  if (v3) found.push({ version: v3, source: "python/pyproject.toml".slice(isCheckout ? 0 : 7) });
  if (found.length === 0 && isCheckout) {
    const tag = fromGitTag(dirname(parent));
    if (tag) found.push({ version: tag, source: "git tag at HEAD" });
  }
  return found;
}

/** The version used: the flag's, else the most trusted source's; disagreements become warnings. */
function pickVersion(
  found: { version: string; source: string }[],
  flag: string | undefined,
  warnings: string[],
): { version: string | null; versionSource: string | null } {
  if (flag) {
    for (const f of found)
      if (f.version !== flag)
        warnings.push(`${f.source} says ${f.version}, overridden by --sglang-version ${flag}`);
    return { version: flag, versionSource: "--sglang-version" };
  }
  if (found.length === 0) return { version: null, versionSource: null };
  const { version, source } = found[0];
  for (const f of found.slice(1))
    if (f.version !== version)
      warnings.push(
        `${f.source} says ${f.version}, but ${source} says ${version} (using ${version})`,
      );
  return { version, versionSource: source };
}

/** realpath that tolerates missing paths. */
export function real(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
}
