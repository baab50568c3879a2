"""The hunk-coverage mapping (python/kvctl_testbed/hunk_coverage.py): replaying the series over
the venv's pristine SGLang gives the patched tree byte for byte, and the check fails naming the
line and the tree core when one added statement never ran on that core (a line run before any
core was built counts for both), fails when no process built one of the cores, passes when all
ran on both."""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from kvctl_testbed import hunk_coverage as hc  # noqa: E402


def _added_statements(tree):
    out = {}
    for rel, tagged in hc.added_lines(hc.pristine_root()).items():
        stmts = hc._statements(os.path.join(tree, rel))
        out[rel] = sorted(ln for ln, (_t, tag) in enumerate(tagged, 1) if tag and ln in stmts)
    return out


def _write_data(data_dir, by_context):
    """One process's data: {coverage context (the tree core label): {file: lines}}."""
    from coverage import CoverageData

    d = CoverageData(basename=os.path.join(data_dir, ".coverage.test.1"))
    for context, lines_by_rel in by_context.items():
        d.set_context(context)
        d.add_lines({f"/elsewhere/kvctl-sglang-x/{rel}": lines for rel, lines in lines_by_rel.items()})
    d.write()


def test_replaying_the_series_gives_the_patched_tree(patched_tree):
    files = hc.added_lines(hc.pristine_root())
    patches = {os.path.basename(p) for p in hc.series_patches(hc.series_dir())}
    assert {tag for tagged in files.values() for _t, tag in tagged if tag} == patches
    for rel, tagged in files.items():
        with open(os.path.join(patched_tree, rel), encoding="utf-8") as f:
            assert f.read().split("\n") == [t for t, _ in tagged], rel


def test_check_names_the_one_unexecuted_statement_and_its_core_and_passes_when_all_ran(tmp_path, patched_tree):
    stmts = _added_statements(patched_tree)
    assert sum(len(v) for v in stmts.values()) > 10
    rel = next(r for r, v in sorted(stmts.items()) if v and hc.cores_of(r) == hc.CORES)
    dropped = stmts[rel][0]
    partial = {r: (v[1:] if r == rel else v) for r, v in stmts.items()}
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_data(str(bad), {"python": stmts, "rust": partial})  # ran on the Python core only
    r = hc.check(str(bad), patched_tree)
    assert not r["ok"] and r["missing"] == 1
    ((core, missing),) = [(c, m) for per in r["patches"].values() for c, e in per.items() for m in e["missing"]]
    assert (core, missing["file"], missing["line"]) == ("rust", rel, dropped)

    before_any_core = tmp_path / "neutral"
    before_any_core.mkdir()  # run before the process built a core: counts for both
    _write_data(str(before_any_core), {"python": partial, "rust": partial, "": {rel: [dropped]}})
    r = hc.check(str(before_any_core), patched_tree)
    assert r["ok"] and r["missing"] == 0, r

    good = tmp_path / "good"
    good.mkdir()
    _write_data(str(good), {"python": stmts, "rust": stmts})
    r = hc.check(str(good), patched_tree)
    assert r["ok"] and r["missing"] == 0, r


def test_check_fails_when_no_process_built_one_of_the_cores(tmp_path, patched_tree):
    stmts = _added_statements(patched_tree)
    _write_data(str(tmp_path), {"": stmts, "python": stmts})  # every line ran, never on Rust
    r = hc.check(str(tmp_path), patched_tree)
    assert r["missing"] == 0 and r["cores_seen"] == ["python"] and not r["ok"]
