"""Builds the patched SGLang test tree: the installed sglang 0.5.23 copied (hard links, then the
patch tool replaces touched files by temp-file + rename, so the venv's copy is never written),
the series applied with `kvctl patch apply`, and sys.path pointed at it. Used by conftest.py and
python/bench/pin_flood.py."""
from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STAND_INS = os.path.join(os.path.dirname(__file__), "stand_ins")


def installed_site_packages() -> str:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin, "sglang is not installed in this venv"
    return os.path.dirname(os.path.dirname(spec.origin))


def build_patched_tree(dest: str | None = None) -> str:
    """Returns the directory that contains the patched `sglang` package."""
    site = installed_site_packages()
    if dest is None:
        dest = tempfile.mkdtemp(prefix="kvctl-sglang-")
        atexit.register(shutil.rmtree, dest, True)  # ours to remove: hard links, cheap
    subprocess.run(["cp", "-al", os.path.join(site, "sglang"), os.path.join(dest, "sglang")], check=True)
    for info in glob.glob(os.path.join(site, "sglang-*.dist-info")):
        shutil.copytree(info, os.path.join(dest, os.path.basename(info)))
    cmd = ["node", "--import", "tsx", "src/cli/bin.ts", "patch", "apply", dest, "--json"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kvctl patch apply failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return dest


def activate(tree: str) -> None:
    """Put the patched tree (and the CPU stand-ins) first on sys.path and import sglang from it."""
    for p in (STAND_INS, tree):
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    import sglang

    assert os.path.realpath(sglang.__file__).startswith(os.path.realpath(tree)), sglang.__file__
    os.environ["PYTHONPATH"] = os.pathsep.join([STAND_INS, tree, os.environ.get("PYTHONPATH", "")])


if __name__ == "__main__":  # builds a tree that stays (pass a directory to choose where)
    t = build_patched_tree(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kvctl-sglang-"))
    print(json.dumps({"tree": t}))
