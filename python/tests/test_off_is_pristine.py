"""kvctl off = SGLang unpatched. The same seeded workload (python/bench/workload.py: inserts,
matches and evictions at a full pool) runs in two fresh processes, one on the pristine SGLang
of the venv and one on the patched tree with no kvctl flag; both must pick the same tree core
(SGLang's Rust core) and produce identical KV event streams and match results. A third run with
kvctl on shows the comparison can fail: it selects the Python core."""
import json
import os
import subprocess
import sys

import sglang_tree

_HERE = os.path.dirname(__file__)
_WORKLOAD = os.path.join(_HERE, "..", "bench", "workload.py")


def _run(tree, *args):
    env = dict(os.environ)
    env.pop("KVCTL_NATS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join([sglang_tree.STAND_INS] + ([tree] if tree else []))
    env["PYTHONWARNINGS"] = "ignore"
    out = subprocess.run([sys.executable, _WORKLOAD, "--requests", "250", "--seed", "7", "--pool-tokens", "1024", *args],
                         env=env, capture_output=True, text=True, timeout=600, cwd=_HERE)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_patched_but_off_serves_exactly_like_pristine(patched_tree):
    pristine = _run(None)
    off = _run(patched_tree)
    assert pristine["core"].endswith("RustUnifiedTreeCore")
    assert off["core"] == pristine["core"]
    assert off["matches"] == pristine["matches"] and any(pristine["matches"])
    kinds = {e["type"] for e in pristine["events"]}
    assert {"BlockStored", "BlockRemoved"} <= kinds  # the workload evicts: the comparison covers it
    assert off["events"] == pristine["events"]


def test_on_is_different_so_the_comparison_can_fail(patched_tree):
    on = _run(patched_tree, "--kvctl", "on")
    assert on["core"].endswith(".UnifiedTreeCore")
