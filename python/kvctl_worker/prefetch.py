"""The short device holds on what a Prefetch loaded, and why its loads are made the way they are.

The loads (``tiers.load_path``) are SGLang 0.5.23's own: ``UnifiedRadixCache.load_back`` (called with ``req=None``, as
ToolEnd does; it locks the path, allocates device slots, evicting LRU blocks if needed, queues
the copy and commits the node back to the device, which emits BlockStored GPU), then
``ready_to_load_host_cache`` starts the copy and ``loading_check`` completes it, on the scheduler
thread. Nodes load one at a time, shallowest first, each copy finished before the next starts
and before the ack: no batch runs meanwhile, so no request can read a block whose copy is still
under way (a request's own load-back is ordered before its forward by the batch; a prefetch has
no batch). The deadline is checked before each node: past it the rest stay on host.

What a Prefetch loaded is held on the device (one ``inc_lock_ref`` on the deepest node, which
locks its path) so the LRU does not take it back before the request it was loaded for is
scheduled. A hold goes when that request (or anything else) holds the node itself, when it
expires (``prefetch_hold_s``), or with a cache reset.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional

from . import clock as clocks

PREFETCH_HOLD_S = 10.0  # default of KvctlConfig.prefetch_hold_s


@dataclasses.dataclass
class DeviceHold:
    node: Any
    params: Any  # the inc_lock_ref receipt
    expires_at: float


class PrefetchHolds:
    """One device hold per node a Prefetch loaded (a newer Prefetch of it renews the expiry)."""

    def __init__(self, hold_s: float = PREFETCH_HOLD_S,
                 taken_over: Optional[Callable[[Any, DeviceHold], bool]] = None,
                 clock: Callable[[], float] = clocks.monotonic):
        self.hold_s = hold_s
        # (cache, hold) -> True when another holder locks the node too, the hold's own lock
        # then released (the tree's moves know how to tell: tiers / rust_core.moves)
        self.taken_over = taken_over if taken_over is not None else release_if_locked_by_others
        self.clock = clock
        self.holds: Dict[int, DeviceHold] = {}  # by node id
        self.metrics = {"prefetch_holds_expired": 0, "prefetch_holds_taken_over": 0}

    def hold(self, cache, nodes: List[Any]) -> int:
        """Hold each node's path on the device; returns how many holds are new."""
        new = 0
        expires = self.clock() + self.hold_s
        for n in nodes:
            h = self.holds.get(n.id)
            if h is not None:
                h.expires_at = expires
                continue
            receipt = cache.inc_lock_ref(n.id)
            self.holds[n.id] = DeviceHold(n, receipt.to_dec_params(), expires)
            new += 1
        return new

    def _release(self, cache, key: int) -> None:
        h = self.holds.pop(key)
        cache.dec_lock_ref(h.node.id, h.params)

    def reap(self, cache, now: Optional[float] = None) -> int:
        """Release the holds that expired, and those whose node another holder (a request that
        matched it, a deeper hold) now locks too. Returns how many went."""
        if not self.holds:
            return 0
        now = self.clock() if now is None else now
        gone = 0
        for key, h in list(self.holds.items()):
            if h.expires_at <= now:
                self.metrics["prefetch_holds_expired"] += 1
                self._release(cache, key)
            elif self.taken_over(cache, h):
                self.metrics["prefetch_holds_taken_over"] += 1
                del self.holds[key]
            else:
                continue
            gone += 1
        return gone

    def clear(self) -> None:
        """Cache reset: the tree the receipts were for is gone."""
        self.holds.clear()


def release_if_locked_by_others(cache, hold: DeviceHold) -> bool:
    """Python core: the node's own lock count says whether someone else holds it too."""
    cds = getattr(hold.node, "component_data", None)
    if not (bool(cds) and any(cd.lock_ref > 1 for cd in cds)):
        return False
    cache.dec_lock_ref(hold.node.id, hold.params)
    return True
