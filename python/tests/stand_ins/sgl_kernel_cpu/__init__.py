"""CPU stand-in for the CPU build of ``sgl_kernel`` (real-server test bed only; python/README.md).

Why: with ``SGLANG_USE_CPU_ENGINE=1`` SGLang 0.5.23 imports CPU helpers from ``sgl_kernel`` at
module level (``kernels/ops/kvcache/cache_move.py``: ``copy_all_layer_kv_cache_cpu``;
``srt/mem_cache/allocation.py``: ``assign_req_to_token_pool_cpu``; ``kernels/ops/speculative/*``).
That build is an AVX-512/AMX source build, not on any package registry. On the plain and HiCache
serving path none of those functions is called; they only have to import.

What it does: served as ``sgl_kernel`` (and every ``sgl_kernel.*`` submodule) by the finder that
``sitecustomize.py`` installs when ``KVCTL_CPU_STAND_INS=server``. Every attribute is a placeholder
that raises when called, naming itself, so a call on a path we did not expect fails loudly. It
registers no ``torch.ops.sgl_kernel`` op, so ``cpu_has_amx_support()`` stays false and SGLang's
layers take their ``forward_native`` (pure torch) paths.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kvctl-cpu-stand-in"


class _Unavailable:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __call__(self, *_a, **_k):
        raise RuntimeError(f"{self._name}: sgl_kernel is a CPU stand-in in the kvctl test bed (no CPU kernels)")


def _module_getattr(modname: str):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{modname}.{attr}")

    return __getattr__


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``sgl_kernel`` and its submodules as placeholder modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__version__ = __version__
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        pass


def install() -> None:
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())
