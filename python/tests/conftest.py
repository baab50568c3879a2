"""Test bed: the installed SGLang 0.5.23, copied to a temp dir, patched with `kvctl patch apply`,
imported from there (asserted), with the CPU stand-ins of python/tests/stand_ins/ first on
sys.path. The tree is built once per session, at collection time, so that SGLang's own test kits
and our tests import the patched modules."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # kvctl_harness: ours, never placed
import sglang_tree  # noqa: E402

_TREE = os.environ.get("KVCTL_TEST_SGLANG_TREE") or sglang_tree.build_patched_tree()
sglang_tree.activate(_TREE)

import core_context  # noqa: E402  (stand_ins, first on sys.path since activate)
import pytest  # noqa: E402

# kvctl is off unless configured; the tests build caches outside a server (no published server
# args), so they turn it on for the process, as a --kv-control-config flag would. The off = pristine
# test switches it off explicitly.
from sglang.srt.kvctl import config as _kvctl_config  # noqa: E402

_kvctl_config.use(_kvctl_config.KvctlConfig())


core_context.install()


@pytest.fixture(autouse=True)
def _coverage_core_context():
    """Hunk coverage per tree core: each test starts unlabelled; building a tree core labels
    what runs after it with that core (stand_ins/core_context.py)."""
    core_context.switch("")
    yield


@pytest.fixture(scope="session")
def patched_tree() -> str:
    return _TREE


@pytest.fixture(params=("python", "rust"))
def core(request, monkeypatch):
    """A test that takes this fixture runs once per SGLang tree core, picked the way an operator
    picks it (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND; helpers.make_unified asserts SGLang chose
    it), with kvctl accepting what that core carries: every command on the Python core, all but
    Think on the Rust one (kvctl cores.py)."""
    from sglang.srt.kvctl import cores

    monkeypatch.setenv("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", request.param)
    accepted = _kvctl_config.KvctlConfig().commands
    if request.param == "rust":
        accepted = accepted - set(cores.PYTHON_ONLY)
    _kvctl_config.use(_kvctl_config.KvctlConfig(commands=accepted))
    yield request.param
    _kvctl_config.use(_kvctl_config.KvctlConfig())
