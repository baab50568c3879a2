"""Mock pools and links: SGLang's own cache classes over pools that hold no KV bytes, with every
HiCache copy completed on the virtual clock at the profile's link speed (the pattern of SGLang's
own simulator, tools/sglang-simulator: mock pools, the real allocator, tree and controller).

What is modelled here, and nothing else:
  * the device pool: SGLang's ``MHATokenToKVPool`` sized in tokens like the GPU's, one layer of one
    head of one half-precision value per token (the allocator, the tree and the controller only
    ever see its indices);
  * the host pool: SGLang's own host pool class, its buffer a ``meta`` tensor (no bytes);
  * the copies: ``SimTransferEngine`` takes the place of the controller's ``L2TransferEngine``;
    each submitted copy occupies its link (h2d or d2h, one FIFO each) for
    ``profile.link_s(link, tokens * kv_bytes_per_token)`` and its completion event fires then.
"""
from __future__ import annotations

from typing import Any, Dict

from .virtual import CLOCK, SimEvent

LINKS = ("h2d", "d2h", "storage_read", "storage_write")


class Links:
    """One worker's links, each a queue of copies on the virtual clock, and what they moved."""

    def __init__(self, profile: Any):
        self.profile = profile
        self.free_at: Dict[str, float] = dict.fromkeys(LINKS, 0.0)
        self.bytes: Dict[str, int] = dict.fromkeys(LINKS, 0)

    def transfer(self, link: str, tokens: int) -> float:
        """Queues a copy of ``tokens`` tokens' KV on ``link`` now; returns when it completes."""
        if tokens <= 0:
            return CLOCK.now
        nbytes = tokens * self.profile.kv_bytes_per_token
        start = max(CLOCK.now, self.free_at[link])
        done = start + self.profile.link_s(link, nbytes)
        self.free_at[link] = done
        self.bytes[link] += nbytes
        return done


def _event(done_at: float) -> SimEvent:
    ev = SimEvent()
    ev.done_at = done_at
    return ev


class _NoStream:
    """The transfer streams' stand-in: copies are queued on Links, nothing runs on a stream."""

    def wait_stream(self, *_a, **_k) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _tokens(transfers) -> int:
    return sum(len(t.host_indices) for t in transfers if t.host_indices is not None)


class SimTransferEngine:
    """The controller's L2 transfer engine for a pool without bytes (see the module docstring)."""

    def __init__(self, links: Links):
        self.links = links
        self.io_backend = "direct"
        self.device_to_host_stream = _NoStream()
        self.host_to_device_stream = _NoStream()

    def submit_device_to_host(self, transfers):
        from sglang.srt.mem_cache.l2_transfer import TransferCompletion

        done = self.links.transfer("d2h", _tokens(transfers))
        return TransferCompletion(_event(CLOCK.now), _event(done), False)

    def submit_host_to_device(self, transfers, *, transfer_layer_id_max: int, start_event=None,
                              on_layer_done=None):
        from sglang.srt.mem_cache.l2_transfer import TransferCompletion

        done = self.links.transfer("h2d", _tokens(transfers))
        if on_layer_done is not None:
            for layer in range(transfer_layer_id_max):
                on_layer_done(layer)
        return TransferCompletion(_event(CLOCK.now), _event(done), False)


def _meta_host_alloc(dims, dtype, device=None, pin_memory=False, allocator=None, **_kw):
    import torch

    return torch.empty(dims, dtype=dtype, device="meta")


def install_mock_pools() -> None:
    """Once per process: host pools allocate no bytes; the CPU stream and event methods HiCache
    calls exist (python/tests/stand_ins/cpu_cuda.py, the stand-ins the worker harness uses)."""
    import cpu_cuda
    import sglang.srt.mem_cache.pool_host.base as base
    import sglang.srt.mem_cache.pool_host.common as common

    cpu_cuda.install()
    common.ALLOC_MEMORY_FUNCS["cpu"] = _meta_host_alloc
    common.ALLOC_MEMORY_FUNCS.default_factory = lambda: _meta_host_alloc
    # The host-memory check guards a GPU host's RAM; these pools take none of it.
    base.HICACHE_HOST_MEMORY_RESERVE_BYTES = 0
    base.host_memory_budget_bytes = lambda requested_bytes=0, **_kw: max(requested_bytes, 1 << 40)
