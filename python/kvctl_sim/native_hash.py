"""SGLang's page-hash extension (``mem_cache/cpp_utils``), built once per machine for the fleet.

SGLang JIT-builds it from the ``hash_binding.cpp`` beside ``native_hash.py``, into one build
directory per extension name. The patched tree a run uses sits in a fresh temporary directory, so
the build's source path changed on every fleet process and every one of them recompiled it
(seconds of g++ each, hundreds of times over a regime map). Here the same source bytes are copied
to a path named by their digest and built under a name of the same digest; SGLang's loader is then
pointed at that module. The hash is SGLang's own code, compiled with SGLang's own flags.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any


def _stable_source(data: bytes, digest: str) -> str:
    from torch.utils.cpp_extension import get_default_build_root

    d = os.path.join(get_default_build_root(), f"kvctl_sim_src_{digest}")
    path = os.path.join(d, "hash_binding.cpp")
    if not os.path.exists(path):
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # another fleet process may write the same bytes at once
    return path


_MODULE: Any = None


def preload_native_hash() -> Any:
    """Builds (or loads the built) extension from a stable copy of the tree's source and makes
    SGLang's loader return it, once per process. Returns the module."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    from sglang.srt.mem_cache.cpp_utils import native_hash as nh
    from sglang.srt.utils.cpp_extension_loader import load_extension_with_recovery

    src = os.path.join(os.path.dirname(os.path.abspath(nh.__file__)), "hash_binding.cpp")
    with open(src, "rb") as f:
        data = f.read()
    # The flags are part of the build: SGLang's own (native_hash._load_native_hash_module).
    cflags = ["-O3", "-std=c++17", "-DNDEBUG"]
    if nh._cpu_supports_avx2():
        cflags.append("-mavx2")
    # So is torch's directory as this process reaches it: torch writes its library path into the
    # link line, and a venv reached by another path (a worktree's link to it) would rewrite that
    # line and rebuild the one extension every fleet process loads, each waiting on its lock.
    import torch

    where = os.path.dirname(os.path.abspath(torch.__file__))
    digest = hashlib.sha256(data + " ".join(cflags).encode() + where.encode()).hexdigest()[:16]
    module = load_extension_with_recovery(
        name=f"kvctl_sim_hicache_hash_{digest}", sources=[_stable_source(data, digest)],
        extra_cflags=cflags, extra_ldflags=["-lcrypto"], with_cuda=False)
    nh._load_native_hash_module = lambda: module
    _MODULE = module
    return module
