"""CPU stand-ins for the three CUDA-only pieces HiCache touches (test bed only; python/README.md).

1. Host-memory registration: HiCache's host pool allocates its buffer with
   ``alloc_with_host_register`` (pool_host/common.py), which calls ``cudaHostRegister`` through
   ``torch.cuda.cudart()``. On CPU the stand-in allocates plain memory with ``torch.empty``.
2. Stream synchronisation: the controller's transfer streams are ``torch.cpu.Stream`` on CPU,
   which lacks ``synchronize``/``wait_stream``/... CPU copies are synchronous, so the missing
   methods are no-ops.
3. ``sgl_kernel.kvcacheio.transfer_kv_direct`` (a CUDA kernel; pool_host/mha.py imports it only
   on CUDA/ROCm/XPU): the stand-in does what the kernel does, per layer buffer
   ``dst[dst_indices] = src[src_indices]``, with torch indexing on CPU.

Everything else of HiCache is SGLang's own code: HybridCacheController with
``hicache_io_backend="direct"`` copies the KV tensors between the CPU "device" pool and the host
pool with real tensor indexing, so data and indices are checked, not just flags.
"""
import torch


def cpu_host_alloc(dims, dtype, device=None, pin_memory=False, allocator=None, **_kw):
    return torch.empty(dims, dtype=dtype, device="cpu")


def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size=1):
    assert len(src_layers) == len(dst_layers) and src_indices.numel() == dst_indices.numel()
    for src, dst in zip(src_layers, dst_layers):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)].to(dst.device)


def _noop(self, *_a, **_k):
    return None


def install() -> None:
    import sglang.srt.mem_cache.pool_host.common as common

    import sglang.srt.mem_cache.pool_host.mha as mha

    common.ALLOC_MEMORY_FUNCS["cpu"] = cpu_host_alloc
    if not hasattr(mha, "transfer_kv_direct"):
        mha.transfer_kv_direct = transfer_kv_direct
    for cls in (torch.cpu.Stream, torch.cpu.Event):
        for name in ("synchronize", "wait_stream", "wait_event", "record_event", "record", "wait"):
            if not hasattr(cls, name):
                setattr(cls, name, _noop)
    if not hasattr(torch.cpu.Event, "query"):
        torch.cpu.Event.query = lambda self: True


def install_unpinned_host_pages() -> None:
    """Real servers with an L3 backend: the host pool asks for pinned (page-locked) staging pages
    when it reads a storage page (``get_dummy_flat_data_page``); pinning needs CUDA, so host pools
    are built with ``pin_memory=False`` (the harness sets the same in helpers.attach_file_storage)."""
    import sglang.srt.mem_cache.pool_host.base as base

    cls = base.HostKVCache
    if getattr(cls.__init__, "_kvctl_unpinned", False):
        return
    init = cls.__init__

    def __init__(self, *a, **k):
        init(self, *a, **k)
        self.pin_memory = False

    __init__._kvctl_unpinned = True
    cls.__init__ = __init__


# Host memory a real test-bed server leaves free before it sizes its HiCache host pool.
TEST_BED_HOST_RESERVE_BYTES = 1 << 30


def install_host_memory_reserve() -> None:
    """Real servers: SGLang refuses to build a HiCache host pool unless 10 GiB of host memory
    stay free beside it (``HICACHE_HOST_MEMORY_RESERVE_BYTES`` in pool_host/base.py, the headroom
    of a GPU host). The test bed runs many small CPU servers on one shared machine, each needing
    about a GiB, so that check refuses them whenever the machine dips under 10 GiB available
    (the server exits before it is ready); the test bed keeps 1 GiB free instead."""
    import sglang.srt.mem_cache.pool_host.base as base

    global _SGLANG_HOST_RESERVE_BYTES
    if _SGLANG_HOST_RESERVE_BYTES is None:
        _SGLANG_HOST_RESERVE_BYTES = base.HICACHE_HOST_MEMORY_RESERVE_BYTES
    base.HICACHE_HOST_MEMORY_RESERVE_BYTES = TEST_BED_HOST_RESERVE_BYTES


_SGLANG_HOST_RESERVE_BYTES = None  # SGLang's own, kept when the test bed's replaces it


def sglang_host_memory_reserve() -> int:
    """SGLang's own reserve, also after install_host_memory_reserve replaced it in this process."""
    import sglang.srt.mem_cache.pool_host.base as base

    if _SGLANG_HOST_RESERVE_BYTES is not None:
        return _SGLANG_HOST_RESERVE_BYTES
    return base.HICACHE_HOST_MEMORY_RESERVE_BYTES
