"""One simulated worker's cache: SGLang 0.5.23's UnifiedRadixCache (Python tree core) with its
HiCache host tier, built as a server builds it from its flags, over the mock pools of pools.py.

The flags a configuration varies are the ones a deployment would pass: the pool sizes (from the
profile: ``--max-total-tokens``, ``--hicache-ratio``), ``--page-size``,
``--enable-session-radix-cache`` and ``--radix-eviction-policy``, and kvctl on or off (its
command layer and block index, as ``--kv-control-config`` turns them on). Every worker runs the
Python tree core: it is the core kvctl's hooks live in, and the same core for every
configuration keeps the comparison about policy, not about the core. With an L3
(``--hicache-storage-backend``), its storage tier is storage.py's.
"""
from __future__ import annotations

import atexit
import dataclasses
from typing import Any

from .pools import Links, SimTransferEngine
from .storage import StorageThreads, server_args_extra, store_name


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    id: str
    page_size: int
    device_tokens: int
    #: 0: no HiCache host tier.
    host_tokens: int
    chunked_prefill_size: int
    session_radix: bool = False
    eviction: str = "lru"
    kvctl: bool = False
    events: bool = True
    #: HiCache's L3 (storage.py): "none", "worker" (a store of its own), "shared" (the fleet's).
    storage: str = "none"


@dataclasses.dataclass
class BuiltCache:
    cache: Any
    allocator: Any
    links: Links
    #: The L3's thread bodies on the virtual clock (None: no L3).
    storage: Any = None


def _server_args(spec: WorkerSpec, **extra):
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(model_path="dummy", page_size=spec.page_size,
                      enable_session_radix_cache=spec.session_radix,
                      radix_eviction_policy=spec.eviction, **extra)


def _pools(spec: WorkerSpec):
    import torch
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    pool = MHATokenToKVPool(size=spec.device_tokens, page_size=spec.page_size, dtype=torch.float16,
                            head_num=1, head_dim=1, layer_num=1, device="cpu",
                            enable_memory_saver=False)
    alloc = PagedTokenToKVPoolAllocator(size=spec.device_tokens, page_size=spec.page_size,
                                        dtype=torch.float16, device="cpu", kvcache=pool,
                                        need_sort=True)
    # Requests keep their own rows here (worker.py); the cache reads this pool only on a path the
    # simulated scheduler does not take.
    r2t = ReqToTokenPool(size=1, max_context_len=spec.page_size, device="cpu",
                         enable_memory_saver=False)
    return r2t, alloc


def build_cache(spec: WorkerSpec, profile: Any) -> BuiltCache:
    """Builds the worker's cache; kvctl's config (process-wide) is set for it first."""
    from sglang.srt.kvctl import config as kvctl_config
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    kvctl_config.use(kvctl_config.KvctlConfig(worker_id=spec.id) if spec.kvctl else None)
    set_global_server_args_for_scheduler(_server_args(spec))
    r2t, alloc = _pools(spec)
    params = CacheInitParams(
        req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=spec.page_size,
        disable=False, tree_components=(ComponentType.FULL,), enable_kv_cache_events=spec.events,
        eviction_policy=spec.eviction, enable_session_radix_cache=spec.session_radix,
        chunked_prefill_size=spec.chunked_prefill_size, tree_core_backend="python")
    cache = UnifiedRadixCache(params=params)
    links = Links(profile)
    store = store_name(spec.storage, spec.id)
    if store is not None and spec.host_tokens <= 0:
        raise ValueError(f"storage: worker {spec.id}: an L3 needs HiCache's host tier (host_tokens > 0)")
    storage = None
    if store is not None:
        from sglang.srt.runtime_context import get_parallel

        # One scheduler, no TP/PP: the storage config reads these ranks (kvctl_harness does too).
        get_parallel().override_permanently(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1)
    if spec.host_tokens > 0:
        sa = _server_args(spec, hicache_io_backend="direct", hicache_mem_layout="layer_first",
                          hicache_write_policy="write_through",
                          hicache_ratio=spec.host_tokens / spec.device_tokens,
                          **(server_args_extra(store) if store else {}))
        set_global_server_args_for_scheduler(sa)
        cache.init_hicache(sa, params)
        atexit.unregister(cache.shutdown)
        cache.cache_controller.l2_transfer_engine = SimTransferEngine(links)
        if store is not None:
            storage = StorageThreads(cache, links, spec.page_size)
    return BuiltCache(cache, alloc, links, storage)
