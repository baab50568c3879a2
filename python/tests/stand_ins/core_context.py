"""Test bed only (hunk coverage per tree core): labels what coverage.py records in this process
with the tree core SGLang builds, so that kvctl_testbed.hunk_coverage checks every line the patch
series adds once per core.

SGLang builds a UnifiedRadixCache's tree core through the factories of its registry
(`unified_cache/tree_core_registry._TREE_CORE_REGISTRY`); each factory is wrapped here to switch
coverage's dynamic context to the core's name ("python" or "rust") before it runs, so the lines a
process runs from then on are recorded under that core. Lines run before any core is built
(imports, argument parsing, the HTTP server process) keep the empty context, which the check
counts for both cores; pytest resets to it before each test (conftest.py). Nothing happens when
coverage is not measuring this process. Never part of the patch series.
"""
from __future__ import annotations

import importlib.abc
import sys

REGISTRY = "sglang.srt.mem_cache.unified_cache.tree_core_registry"


def _coverage():
    try:
        import coverage
    except ImportError:
        return None
    return coverage.Coverage.current()


def switch(context: str) -> None:
    cov = _coverage()
    if cov is not None:
        cov.switch_context(context)


def _wrap_factories(registry) -> None:
    table = registry._TREE_CORE_REGISTRY
    for name, factory in list(table.items()):
        if getattr(factory, "_kvctl_core_context", False):
            continue

        def labelled(params, components, _name=name, _factory=factory):
            switch(_name)
            return _factory(params, components)

        labelled._kvctl_core_context = True
        table[name] = labelled


class _AfterRegistry(importlib.abc.MetaPathFinder):
    """Wraps the registry's factories once its module has been executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != REGISTRY:
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_wrap(module):
            exec_module(module)
            _wrap_factories(module)

        spec.loader.exec_module = exec_then_wrap
        return spec


def install() -> None:
    """Label this process's coverage by tree core (a no-op when coverage is not measuring)."""
    if _coverage() is None:
        return
    if REGISTRY in sys.modules:
        _wrap_factories(sys.modules[REGISTRY])
    elif not any(isinstance(f, _AfterRegistry) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterRegistry())
