"""Every line the patch series adds to SGLang must have run: coverage.py data from the test run
(the pytest process, the worker harnesses and the real servers it and vitest started, each with
COVERAGE_PROCESS_START) mapped onto the lines each patch of patches/sglang-<v>/series adds.

The mapping is computed from the series files at check time: each touched file of the venv's
pristine SGLang is replayed through the series' hunks (exact context, offsets allowed, as
`kvctl patch apply` does), tagging every line a patch adds; the result must equal the patched
tree's file byte for byte. Of the added lines, those coverage.py counts as statements must have
been executed, once per SGLang tree core: every process labels what it runs with the tree core
it built (python/tests/stand_ins/core_context.py; "" before any, which counts for both), a core's
own file (CORE_FILES) is checked on that core only, SGLang's plain RadixCache on either, every
other file on both (CORELESS_FILES on either). Exceptions live in hunk_allow.txt, one per line:

    <patch file name>[@<core>] | <exact stripped text of the added line> | <reason>

    python -m kvctl_testbed.hunk_coverage rcfile --data-dir DIR     # writes DIR/coveragerc, prints it
    python -m kvctl_testbed.hunk_coverage check --data-dir DIR [--json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ALLOW_FILE = os.path.join(os.path.dirname(__file__), "hunk_allow.txt")
CORES = ("python", "rust")
CORE_FILES = {  # a tree core's own file runs only on that core
    "sglang/srt/mem_cache/unified_cache/unified_tree_core.py": "python",
    "sglang/srt/mem_cache/rust_tree_core/adapter.py": "rust",
}
CORELESS_FILES = {  # on either core: RadixCache has none; the registry runs before one is built
    "sglang/srt/mem_cache/radix_cache.py",
    "sglang/srt/mem_cache/unified_cache/tree_core_registry.py",
}
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileDiff:
    path: str  # relative to the package parent: sglang/srt/...
    new_file: bool
    hunks: list[tuple[int, list[str]]] = field(default_factory=list)  # (old start, body lines)


def series_dir() -> str:
    dirs = sorted(glob.glob(os.path.join(REPO, "patches", "sglang-*")))
    if not dirs:
        raise SystemExit("hunk-coverage: no patches/sglang-* series")
    return dirs[-1]


def series_patches(sdir: str) -> list[str]:
    with open(os.path.join(sdir, "series")) as f:
        names = [ln.split("#", 1)[0].strip() for ln in f]
    return [os.path.join(sdir, n) for n in names if n]


def _strip_prefix(p: str) -> str:
    p = p.split("\t", 1)[0].strip()
    return p[2:] if p.startswith(("a/", "b/")) else p


def parse_patch(path: str) -> list[FileDiff]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out: list[FileDiff] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = ln[4:], lines[i + 1][4:]
            fd = FileDiff(path=_strip_prefix(new), new_file=old.split("\t", 1)[0].strip() == "/dev/null")
            out.append(fd)
            i += 2
            continue
        m = HUNK_RE.match(ln)
        if m and out:
            old_len = int(m.group(2)) if m.group(2) is not None else 1
            new_len = int(m.group(4)) if m.group(4) is not None else 1
            body: list[str] = []
            i += 1
            o = n = 0
            while i < len(lines) and (o < old_len or n < new_len):
                b = lines[i]
                if b.startswith("\\"):
                    i += 1
                    continue
                tag = b[:1] if b else " "
                if tag == " ":
                    o += 1
                    n += 1
                elif tag == "-":
                    o += 1
                elif tag == "+":
                    n += 1
                else:
                    break
                body.append(b if b else " ")
                i += 1
            out[-1].hunks.append((int(m.group(1)), body))
            continue
        i += 1
    return out


def _apply(lines: list[tuple[str, str | None]], fd: FileDiff, tag: str) -> list[tuple[str, str | None]]:
    """Applies one file diff to tagged lines (text, patch-that-added-it or None)."""
    if fd.new_file:
        return [(b[1:], tag) for _s, body in fd.hunks for b in body if b.startswith("+")]
    out = list(lines)
    delta = 0
    for start, body in fd.hunks:
        old = [b[1:] for b in body if b[0] in " -"]
        stated = max(start - 1 + delta, 0)
        pos = None
        for off in range(0, len(out) + 1):
            for cand in (stated - off, stated + off) if off else (stated,):
                if 0 <= cand <= len(out) - len(old) and [t for t, _ in out[cand:cand + len(old)]] == old:
                    pos = cand
                    break
            if pos is not None:
                break
        if pos is None:
            raise SystemExit(f"hunk-coverage: {tag}: hunk at -{start} does not apply to {fd.path}")
        new: list[tuple[str, str | None]] = []
        k = pos
        for b in body:
            if b[0] == " ":
                new.append(out[k])
                k += 1
            elif b[0] == "-":
                k += 1
            else:
                new.append((b[1:], tag))
        out[pos:pos + len(old)] = new
        delta += len(new) - len(old)
    return out


def added_lines(pristine_root: str, sdir: str | None = None) -> dict[str, list[tuple[str, str | None]]]:
    """{relative path: final tagged lines} for every file the series touches."""
    sdir = sdir or series_dir()
    files: dict[str, list[tuple[str, str | None]]] = {}
    for p in series_patches(sdir):
        name = os.path.basename(p)
        for fd in parse_patch(p):
            if fd.path not in files:
                if fd.new_file:
                    files[fd.path] = []
                else:
                    with open(os.path.join(pristine_root, fd.path), encoding="utf-8") as f:
                        files[fd.path] = [(t, None) for t in f.read().split("\n")]
            files[fd.path] = _apply(files[fd.path], fd, name)
    return files


def pristine_root() -> str:
    """The venv's own site-packages (never a patched tree that sys.path may point at first)."""
    import sysconfig

    root = sysconfig.get_paths()["purelib"]
    if not os.path.isdir(os.path.join(root, "sglang")):
        raise SystemExit(f"hunk-coverage: sglang is not installed in {root}")
    if os.path.isdir(os.path.join(root, "sglang", "srt", "kvctl")):
        raise SystemExit(f"hunk-coverage: {root}/sglang is patched; need the venv's pristine copy")
    return root


def write_rcfile(data_dir: str) -> str:
    files = sorted(added_lines(pristine_root()))
    os.makedirs(data_dir, exist_ok=True)
    rc = os.path.join(data_dir, "coveragerc")
    include = "\n".join(f"    */{p}" for p in files)
    with open(rc, "w") as f:
        f.write(f"[run]\nparallel = True\nsigterm = True\ndata_file = {os.path.join(data_dir, '.coverage')}\n"
                f"include =\n{include}\n")
    return rc


def load_allow() -> list[tuple[str, str, str]]:
    out = []
    if not os.path.exists(ALLOW_FILE):
        return out
    with open(ALLOW_FILE, encoding="utf-8") as f:
        for n, ln in enumerate(f, 1):
            if not ln.strip() or ln.lstrip().startswith("#"):
                continue
            parts = [p.strip() for p in ln.rstrip("\n").split("|")]
            if len(parts) != 3 or not all(parts):
                raise SystemExit(f"hunk-coverage: {ALLOW_FILE}:{n}: want '<patch> | <line text> | <reason>'")
            out.append((parts[0], parts[1], parts[2]))
    return out


def _statements(path: str) -> set[int]:
    from coverage.parser import PythonParser

    p = PythonParser(filename=path)
    p.parse_source()
    return set(p.statements)


def executed_lines(data_dir: str) -> dict[str, dict[str, set[int]]]:
    """{tree core label: {path relative to the package parent (sglang/...): lines executed}}
    over every process; the label is coverage's context (stand_ins/core_context.py): "python" or
    "rust" once a process built that tree core, "" before any."""
    from coverage import CoverageData

    out: dict[str, dict[str, set[int]]] = {}
    for df in glob.glob(os.path.join(data_dir, ".coverage*")):
        if df.endswith(("-journal", "-wal", "-shm")):
            continue
        d = CoverageData(basename=df)
        d.read()
        for f in d.measured_files():
            i = f.rfind("/sglang/")
            if i < 0:
                continue
            for ln, contexts in d.contexts_by_lineno(f).items():
                for c in contexts:
                    out.setdefault(c, {}).setdefault(f[i + 1:], set()).add(ln)
    return out


def ran_on(executed: dict[str, dict[str, set[int]]], rel: str, core: str) -> set[int]:
    """Lines of `rel` run on `core`: under its label, or before any core was built."""
    return executed.get(core, {}).get(rel, set()) | executed.get("", {}).get(rel, set())


def cores_of(rel: str) -> tuple[str, ...]:
    """The tree cores whose runs must execute the added lines of `rel`: a core's own file only
    on that core; CORELESS_FILES on either; the rest on both."""
    if rel in CORE_FILES:
        return (CORE_FILES[rel],)
    return ("any",) if rel in CORELESS_FILES else CORES


def _ran(executed: dict[str, dict[str, set[int]]], rel: str, core: str) -> set[int]:
    if core == "any":
        return set().union(*(e.get(rel, set()) for e in executed.values()))
    return ran_on(executed, rel, core)


def _allow_hit(allow: list[tuple[str, str, str]], tag: str, core: str, text: str) -> int | None:
    """An allow-list entry names its patch, or `<patch>@<core>` for one tree core only."""
    return next((k for k, (p, t, _r) in enumerate(allow) if p in (tag, f"{tag}@{core}") and t == text), None)


def check(data_dir: str, tree: str) -> dict:
    files = added_lines(pristine_root())
    executed = executed_lines(data_dir)
    allow = load_allow()
    used_allow: set[int] = set()
    per_patch: dict[str, dict[str, dict]] = {}  # patch -> core -> tally
    problems: list[str] = []
    for rel, tagged in sorted(files.items()):
        final = os.path.join(tree, rel)
        with open(final, encoding="utf-8") as f:
            if f.read().split("\n") != [t for t, _ in tagged]:
                problems.append(f"{rel}: replaying the series does not give the patched tree's file")
                continue
        stmts = _statements(final) if rel.endswith(".py") else set()
        for core in cores_of(rel):
            ran = _ran(executed, rel, core)
            for ln, (text, tag) in enumerate(tagged, 1):
                if tag is None or ln not in stmts:
                    continue
                e = per_patch.setdefault(tag, {}).setdefault(
                    core, {"statements": 0, "executed": 0, "allowed": [], "missing": []})
                e["statements"] += 1
                if ln in ran:
                    e["executed"] += 1
                    continue
                where = {"file": rel, "line": ln, "text": text.strip()}
                hit = _allow_hit(allow, tag, core, text.strip())
                if hit is None:
                    e["missing"].append(where)
                else:
                    used_allow.add(hit)
                    e["allowed"].append({**where, "reason": allow[hit][2]})
    stale = [f"{p} | {t}" for k, (p, t, _r) in enumerate(allow) if k not in used_allow]
    missing = sum(len(e["missing"]) for per in per_patch.values() for e in per.values())
    return {"patches": per_patch, "missing": missing, "problems": problems, "stale_allow": stale,
            "processes": len(glob.glob(os.path.join(data_dir, ".coverage.*"))),
            "cores_seen": sorted(c for c in executed if c),
            "ok": missing == 0 and not problems and bool(per_patch) and set(CORES) <= set(executed)}


def print_report(r: dict) -> None:
    for name, per in sorted(r["patches"].items()):
        tallies = [f"{'either core' if core == 'any' else core} {e['executed']}/{e['statements']}"
                   + (f" ({len(e['allowed'])} allowed)" if e["allowed"] else "")
                   + (f" ({len(e['missing'])} NEVER EXECUTED)" if e["missing"] else "")
                   for core, e in sorted(per.items())]
        print(f"{name}: added statements executed: {', '.join(tallies)}")
        for core, e in sorted(per.items()):
            for m in e["missing"]:
                print(f"    {core}: {m['file']}:{m['line']}: {m['text']}")
            for m in e["allowed"]:
                print(f"    {core}: allowed {m['file']}:{m['line']}: {m['text']}  ({m['reason']})")
    for p in r["problems"]:
        print(f"PROBLEM: {p}")
    for s in r["stale_allow"]:
        print(f"note: allow-list entry matches no unexecuted line: {s}")
    for c in sorted(set(CORES) - set(r["cores_seen"])):
        print(f"PROBLEM: no process built SGLang's {c} tree core (stand_ins/core_context.py labels none)")
    print(f"hunk coverage from {r['processes']} process(es), per tree core: "
          + ("every added statement executed" if r["ok"] else f"{r['missing']} added statement(s) never executed"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvctl_testbed.hunk_coverage")
    ap.add_argument("cmd", choices=["rcfile", "check"])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--tree", help="a patched tree to check against (default: built now)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "rcfile":
        print(write_rcfile(a.data_dir))
        return 0
    tree = a.tree
    if tree is None:
        sys.path.insert(0, os.path.join(REPO, "python", "tests"))
        import sglang_tree

        tree = sglang_tree.build_patched_tree()
    r = check(a.data_dir, tree)
    print_report(r)
    if a.json:
        print(json.dumps({"hunk_coverage": "ok" if r["ok"] else "failed", "missing": r["missing"],
                          "processes": r["processes"], "cores": r["cores_seen"]}))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
