"""Tree operations the pins need, for SGLang 0.5.23's two trees.

- RadixOps: plain RadixCache. Lock-based protection (inc/dec_lock_ref): a pinned block stays
  on the GPU; there is no host tier.
- UnifiedOps: UnifiedTreeCore (Python backend), the tree of UnifiedRadixCache. With HiCache the
  protection is the core's existing host lock (``host_lock_ref``): it is checked in
  ``_is_host_leaf`` (host eviction) and NOT in ``_is_device_leaf``, so a pinned node can still be
  demoted GPU->host but never leaves the host. A pinned node is backed up first, whatever the
  write policy. Without HiCache it falls back to the device lock.
"""
from __future__ import annotations

from typing import Any, Iterable, List

from .tiers import tier_names


class RadixOps:
    tier_aware = False

    def __init__(self, cache: Any):
        self.cache = cache

    def root(self):
        return self.cache.root_node

    def pool_tokens(self) -> int:
        alloc = self.cache.token_to_kv_pool_allocator
        size = getattr(alloc, "size", None) if alloc is not None else None
        return int(size) if isinstance(size, int) else self.cache.total_size()

    def protected_tokens(self, _protected: Iterable[Any]) -> int:
        return self.cache.protected_size()

    # A device lock: every pinned token holds GPU memory.
    device_pool_tokens = pool_tokens

    def device_held_tokens(self, protected: Iterable[Any]) -> int:
        return self.protected_tokens(protected)

    def protect(self, node):
        self.cache.inc_lock_ref(node)
        return True

    def release(self, node, _receipt) -> None:
        self.cache.dec_lock_ref(node)

    def tiers(self, node) -> List[str]:
        return [] if node.evicted else ["GPU"]

    def flush_unpinned(self) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        return self.cache.evict(EvictParams(num_tokens=self.cache.evictable_size())).num_tokens_evicted


class UnifiedOps:
    def __init__(self, core: Any, cache: Any = None):
        self.core = core
        self.cache = cache

    @property
    def tier_aware(self) -> bool:
        return bool(getattr(self.core, "enable_hicache", False)) and self.cache is not None

    def root(self):
        return self.core.root_node

    def pool_tokens(self) -> int:
        ctrl = getattr(self.cache, "cache_controller", None) if self.cache is not None else None
        if self.tier_aware and ctrl is not None:
            return int(ctrl.mem_pool_host.size)
        return self.device_pool_tokens()

    def protected_tokens(self, protected: Iterable[Any]) -> int:
        """``protected``: the nodes holding a pin protection (PinManager.protected)."""
        if self.tier_aware:
            return sum(len(n.key) for n in protected)
        return self.core.protected_size()

    def device_pool_tokens(self) -> int:
        alloc = getattr(self.cache, "token_to_kv_pool_allocator", None)
        return int(alloc.size) if alloc is not None else 0

    def device_held_tokens(self, protected: Iterable[Any]) -> int:
        """GPU tokens the pins keep from the scheduler. Under HiCache a pinned node with a host
        copy holds none (its GPU copy is demoted like any other); one still waiting for its
        backup does."""
        if self.tier_aware:
            return sum(len(n.key) for n in protected if not n.evicted and not getattr(n, "backuped", False))
        return self.protected_tokens(protected)

    def _backup_path(self, node) -> None:
        """Back up the root->node path parent-first (host-backed nodes must form a prefix from
        the root) through SGLang's own synchronous write-back primitive, whatever the policy."""
        path = []
        cur = node
        while cur is not self.core.root_node:
            path.append(cur)
            cur = cur.parent
        for n in reversed(path):
            if n.backuped or n.evicted:
                continue
            if not self.cache.backup_node_for_write_back(n.id):
                # host full: make room from unpinned host leaves once, then retry
                self.cache.evict_host(len(n.key))
                self.cache.backup_node_for_write_back(n.id)

    def protect(self, node):
        if self.tier_aware:
            self._backup_path(node)
            try:  # making host room for the backup can cascade; the node must still be there
                self.core.node_by_id(node.id)
            except KeyError:
                return None
            return self.core.inc_host_lock_ref(node.id).to_dec_params()
        return self.core.inc_lock_ref(node.id).to_dec_params()

    def release(self, node, receipt) -> None:
        if self.tier_aware:
            self.core.dec_host_lock_ref(node.id, receipt)
        else:
            self.core.dec_lock_ref(node.id, receipt)

    def tiers(self, node) -> List[str]:
        return tier_names(node)

    def flush_unpinned(self) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        before = self.core.evictable_size()
        self.cache.evict(EvictParams(num_tokens=max(before, 1)))
        if self.tier_aware:
            self.cache.evict_host(self.cache.cache_controller.mem_pool_host.size)
        return before - self.core.evictable_size()
