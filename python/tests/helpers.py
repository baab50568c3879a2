"""Small builders shared by the tests: a real plain RadixCache over a real CPU allocator."""
from __future__ import annotations

from array import array

import torch


def make_radix(page_size: int = 4, size: int = 256, events: bool = True):
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.radix_cache import RadixCache

    pool = MHATokenToKVPool(size=size, page_size=page_size, dtype=torch.float32, head_num=1,
                            head_dim=4, layer_num=1, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=size, dtype=torch.float32, device="cpu", kvcache=pool,
                                   need_sort=False)
    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
                             page_size=page_size, enable_kv_cache_events=events)
    return RadixCache(params), alloc


def insert(cache, alloc, tokens, extra_key=None, cache_salt=None):
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    key = RadixKey(array("q", tokens), extra_key=extra_key, cache_salt=cache_salt)
    value = alloc.alloc(len(tokens))
    assert value is not None, "allocator out of space"
    res = cache.insert(InsertParams(key=key, value=value))
    # insert() does not free the duplicate prefix indices: the scheduler does; mimic it
    dup = getattr(res, "prefix_len", None)
    if dup:
        alloc.free(value[:dup])
    return res


def match(cache, tokens):
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def stored_hashes(cache):
    """Block hashes of the BlockStored events, in order (what the router sees)."""
    from sglang.srt.disaggregation.kv_events import BlockStored

    out = []
    for ev in cache.take_events():
        if isinstance(ev, BlockStored):
            out.extend(ev.block_hashes)
    return out


def make_unified(page_size: int = 4, size: int = 256, hicache: bool = True,
                 write_policy: str = "write_through", events: bool = True, layers: int = 2,
                 core: str | None = None, eviction_policy: str = "lru", sessions: bool = False):
    """A real UnifiedRadixCache over real CPU pools, on SGLang's ``core`` ("python" or "rust"
    tree core, asserted; default SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND, set by the ``core``
    fixture, else "python"); with ``hicache`` its real HybridCacheController copies KV between
    the CPU device pool and the host pool."""
    import os

    core = core or os.environ.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    import atexit

    import cpu_cuda

    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=page_size))
    r2t = ReqToTokenPool(size=8, max_context_len=size, device="cpu", enable_memory_saver=False)
    pool = MHATokenToKVPool(size=size, page_size=page_size, dtype=torch.float32, head_num=1,
                            head_dim=4, layer_num=layers, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=size, dtype=torch.float32, device="cpu", kvcache=pool,
                                   need_sort=False)
    params = CacheInitParams(req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc,
                             page_size=page_size, disable=False,
                             tree_components=(ComponentType.FULL,),
                             enable_kv_cache_events=events, tree_core_backend=core,
                             eviction_policy=eviction_policy, enable_session_radix_cache=sessions)
    cache = UnifiedRadixCache(params=params)
    assert cache._tree_core_backend == core, f"SGLang picked the {cache._tree_core_backend} core"
    if hicache:
        cpu_cuda.install()
        cpu_cuda.install_host_memory_reserve()  # stand-in 5: a shared machine, many small pools
        sa = ServerArgs(model_path="dummy", page_size=page_size, hicache_io_backend="direct", hicache_mem_layout="layer_first",
                        hicache_write_policy=write_policy)
        set_global_server_args_for_scheduler(sa)
        cache.init_hicache(sa, params)
        atexit.unregister(cache.shutdown)
    return cache, alloc, pool


def insert_kv(cache, alloc, pool, tokens, marker=None, priority=None):
    """Insert tokens whose KV rows hold recognisable data (marker + token position)."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    v = alloc.alloc(len(tokens))
    assert v is not None, "allocator out of space"
    data = torch.tensor(tokens, dtype=torch.float32).view(-1, 1, 1).expand(-1, 1, 4)
    for layer in range(pool.layer_num):
        pool.k_buffer[layer][v] = data + layer
        pool.v_buffer[layer][v] = -data - layer
    # UnifiedRadixCache frees the duplicate prefix slots itself (beyond prev_prefix_len=0)
    res = cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=v, priority=priority))
    if getattr(cache, "cache_controller", None) is not None:
        cache.writing_check(write_back=True)
    return res


def kv_of(pool, indices):
    return [(pool.k_buffer[l][indices].clone(), pool.v_buffer[l][indices].clone())
            for l in range(pool.layer_num)]


def umatch(cache, tokens):
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def load_back(cache, node_id):
    """Load a host-only path back to the device the way the scheduler does (SGLang's own kit)."""
    if not cache.load_back(node_id, req=None):
        return False
    assert cache.ready_to_load_host_cache() != -1
    for ack in list(cache.cache_controller.ack_load_queue):
        ack.finish_event.synchronize()
    cache.loading_check()
    return True


def device_indices(cache, match_result):
    core = cache.tree_core
    return core.collect_full_device_indices(match_result.last_device_node, core.root_node_handle())


def chain_hashes(tokens, page_size: int = 4):
    """The hashes SGLang publishes for a token path (no namespace), from its own storage-hash
    chain: what the router computes, whichever tree core holds the blocks."""
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str, hash_str_to_int64

    return [hash_str_to_int64(x) for x in get_storage_hash_str(RadixKey(array("q", tokens)), None,
                                                                page_size=page_size)]


def attach_file_storage(cache, directory):
    """SGLang's own `file` HiCache storage backend (real files under ``directory``), attached the
    way /attach_hicache_storage does, as TP rank 0 of 1."""
    import json

    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1):
        ok, msg = cache.attach_storage_backend("file", json.dumps({"file_storage_path": str(directory)}))
    assert ok, msg
    # CPU stand-in 4 (python/README.md): the host pool asks for pinned (page-locked) staging pages
    # when it reads a storage page (get_dummy_flat_data_page); pinning needs CUDA, so plain memory
    for host_pool in [cache.cache_controller.mem_pool_host,
                      *getattr(cache.cache_controller.storage_backend, "registered_pools", {}).values()]:
        host_pool.pin_memory = False
    return cache.cache_controller.storage_backend


def wait_storage_written(cache, directory, n_files, timeout=10.0):
    import os
    import time

    end = time.time() + timeout
    while time.time() < end:
        cache.writing_check(write_back=True)
        cache.drain_storage_control_queues()
        # done = the files exist AND SGLang has taken the storage acks (their host locks released)
        if len([f for f in os.listdir(directory) if f.endswith(".bin")]) >= n_files \
                and not cache.ongoing_backup:
            return
        # Not a wait for a signal: each pass is a scheduler tick (writing_check + drain are what
        # move the backup on, as the scheduler loop does), and the storage thread offers no
        # completion event to wait on; the pause only spaces the ticks.
        time.sleep(0.05)
    raise AssertionError(f"storage backend wrote {os.listdir(directory)}")


def device_locked(cache, node) -> bool:
    """A device lock on the node (a request's, a prefetch hold's): its lock counts on the Python
    core; on the Rust core, whose adapter exposes no lock count, whether SGLang's own KV-canary
    walk of unlocked slots leaves the node's slots out."""
    if hasattr(node, "component_data"):
        return any(cd.lock_ref > 0 for cd in node.component_data)
    from sglang.srt.kvctl.rust_core.ops import DeviceView

    return DeviceView(cache.tree_core).locked(node)


def no_host_locks(cache) -> bool:
    """No host lock left on any node: walked on the Python core; on the Rust core (no lock counts
    through its adapter) kvctl holds no protection on any node."""
    core = cache.tree_core
    if not hasattr(core, "_binding"):  # the Python core
        stack = [core.root_node]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if n is not core.root_node and any(cd.host_lock_ref for cd in n.component_data):
                return False
        return True
    from sglang.srt.kvctl.hooks import state_for_cache

    return not state_for_cache(cache).pins.protected
