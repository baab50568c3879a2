"""HARNESS: builds SGLang's real cache on CPU the way python/tests/helpers.make_unified does
(UnifiedRadixCache, Python tree core, HiCache over CPU pools with the direct io backend), plus
the file storage backend (HiCacheFile) when a storage directory is given.

Needs the CPU stand-ins module ``cpu_cuda`` (python/tests/stand_ins, put on PYTHONPATH by the
launcher): host-memory registration, CPU stream sync no-ops and ``transfer_kv_direct``.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
from typing import Any, Optional


@dataclasses.dataclass
class CacheConfig:
    page_size: int = 4
    device_tokens: int = 256
    host_ratio: float = 2.0
    layers: int = 2
    head_dim: int = 4
    write_policy: str = "write_through"
    storage_dir: Optional[str] = None
    events: bool = True


@dataclasses.dataclass
class BuiltCache:
    cache: Any
    alloc: Any
    pool: Any
    config: CacheConfig

    @property
    def host_pool(self):
        """The host KV pool (the FULL component's; HiCache wraps it in a HostPoolGroup)."""
        ctrl = getattr(self.cache, "cache_controller", None)
        if ctrl is None:
            return None
        host = ctrl.mem_pool_host
        anchor = getattr(host, "anchor_entry", None)
        return anchor.host_pool if anchor is not None else host


def build_cache(cfg: CacheConfig) -> BuiltCache:
    import torch

    try:
        import cpu_cuda  # python/tests/stand_ins (the documented CPU stand-ins)
    except ImportError as e:  # pragma: no cover - launcher error
        raise SystemExit("kvctl harness: the CPU stand-ins (python/tests/stand_ins) must be on "
                         f"PYTHONPATH: {e}")

    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    # one scheduler, no TP/PP: the storage config reads these ranks
    get_parallel().override_permanently(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)
    page = cfg.page_size
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=page))
    r2t = ReqToTokenPool(size=16, max_context_len=cfg.device_tokens, device="cpu", enable_memory_saver=False)
    pool = MHATokenToKVPool(size=cfg.device_tokens, page_size=page, dtype=torch.float32, head_num=1,
                            head_dim=cfg.head_dim, layer_num=cfg.layers, device="cpu",
                            enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=cfg.device_tokens, dtype=torch.float32, device="cpu",
                                   kvcache=pool, need_sort=False)
    params = CacheInitParams(req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=page,
                             disable=False, tree_components=(ComponentType.FULL,),
                             enable_kv_cache_events=cfg.events)
    cache = UnifiedRadixCache(params=params)
    if cache._tree_core_backend != "python":
        raise SystemExit("kvctl harness: patch 0003 must select the Python tree core")
    cpu_cuda.install()
    # Its pools are a few MB: SGLang's 10 GiB headroom for a GPU host's RAM would refuse them
    # whenever this (shared) machine dips under 10 GiB available; keep the test bed's 1 GiB.
    cpu_cuda.install_host_memory_reserve()
    extra = {}
    if cfg.storage_dir:
        os.makedirs(cfg.storage_dir, exist_ok=True)
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = cfg.storage_dir
        extra["hicache_storage_backend"] = "file"
    sa = ServerArgs(model_path="dummy", page_size=page, hicache_io_backend="direct",
                    hicache_mem_layout="layer_first", hicache_write_policy=cfg.write_policy,
                    hicache_ratio=cfg.host_ratio, **extra)
    set_global_server_args_for_scheduler(sa)
    cache.init_hicache(sa, params)
    atexit.unregister(cache.shutdown)
    if cfg.storage_dir:
        # CPU stand-in 4 (python/README.md, as tests/helpers.attach_file_storage): the host pool
        # asks for pinned staging pages when it reads a storage page; pinning needs CUDA
        ctrl = cache.cache_controller
        for host_pool in [ctrl.mem_pool_host, *getattr(ctrl.storage_backend, "registered_pools", {}).values()]:
            host_pool.pin_memory = False
        anchor = getattr(ctrl.mem_pool_host, "anchor_entry", None)
        if anchor is not None:
            anchor.host_pool.pin_memory = False
    return BuiltCache(cache, alloc, pool, cfg)
