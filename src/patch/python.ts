// Which sglang a Python interpreter would import (a server can silently run
// another installed copy than the patched tree). find_spec locates the package exactly as
// `import sglang` would, without running sglang/__init__.py (which needs torch, numpy, ...).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { real } from "./locate.js";
import { venvPython } from "../paths.js";

export interface InterpreterCheck {
  python: string;
  /** The interpreter ran and answered. */
  ran: boolean;
  executable: string | null;
  /** Directory of the sglang package it imports, or null when it finds none. */
  sglangDir: string | null;
  /** true: it imports the given tree; false: another copy (or none). */
  importsThisTree: boolean;
  error: string | null;
}

const SCRIPT = [
  "import importlib.util, json, os, sys",
  "s = importlib.util.find_spec('sglang')",
  "d = None",
  "if s is not None:",
  "    d = os.path.dirname(s.origin) if s.origin else (list(s.submodule_search_locations or []) or [None])[0]",
  "print(json.dumps({'executable': sys.executable, 'dir': d}))",
].join("\n");

export function defaultPython(): string {
  return existsSync(venvPython) ? venvPython : "python3";
}

export interface SglangProbe {
  /** The interpreter ran and answered. */
  ran: boolean;
  executable: string | null;
  /** Directory of the sglang package it imports, or null when it finds none. */
  sglangDir: string | null;
  error: string | null;
}

/** Where `python` would import sglang from (find_spec: sglang/__init__.py is not run). */
export function probeSglang(
  python: string = defaultPython(),
  env: NodeJS.ProcessEnv = process.env,
): SglangProbe {
  const r = spawnSync(python, ["-c", SCRIPT], { encoding: "utf8", env, timeout: 30_000 });
  const none = { ran: false, executable: null, sglangDir: null };
  if (r.error) return { ...none, error: `cannot run ${python}: ${r.error.message}` };
  if (r.status !== 0)
    return {
      ...none,
      error: `${python} failed: ${(r.stderr || r.stdout).trim().split("\n").pop()}`,
    };
  try {
    const out = JSON.parse(r.stdout.trim().split("\n").pop() ?? "") as {
      executable: string;
      dir: string | null;
    };
    return { ran: true, executable: out.executable, sglangDir: out.dir, error: null };
  } catch {
    return { ...none, error: `unexpected output from ${python}: ${r.stdout.trim().slice(0, 200)}` };
  }
}

export function interpreterSglang(
  pkgDir: string,
  python: string = defaultPython(),
  env: NodeJS.ProcessEnv = process.env,
): InterpreterCheck {
  const p = probeSglang(python, env);
  if (!p.ran)
    return {
      python,
      executable: null,
      sglangDir: null,
      importsThisTree: false,
      ran: false,
      error: p.error,
    };
  const dir = p.sglangDir;
  return {
    python,
    ran: true,
    executable: p.executable,
    sglangDir: dir,
    importsThisTree: dir !== null && real(dir) === real(pkgDir),
    error: null,
  };
}
