"""The tree operations pins and holds need (trees.UnifiedOps on the Python core), on a Rust core,
through the adapter's API and the cache's own methods.

With HiCache a pin is the core's host lock (``inc_host_lock_ref``: host eviction skips the node,
device eviction may still demote it), taken after the node's root path is backed up parent-first
with SGLang's synchronous ``backup_node_for_write_back``, whatever the write policy. Without
HiCache it is the device lock (``inc_lock_ref``). Both receipts are anchored on the node's id,
which a split keeps (the split's new node is the parent, and the lock covers the whole path).

``DeviceView`` is one read of the device tier (``walk_for_kv_canary``: every resident slot with
its predecessor, all of them or the unlocked ones), the only read-only way the adapter offers to
tell whether a node is locked or has resident children. The Rust core panics (and refuses all
later calls) when ``demote`` or ``evict_device_leaf`` gets a locked or inner node, so every such
call is checked against it first.
"""
from __future__ import annotations

from typing import Any, Iterable, List

from .nodes import RustNode, RustNodes

FULL = 0  # ComponentType.FULL


class RustOps:
    def __init__(self, core: Any, nodes: RustNodes, cache: Any = None):
        self.core = core
        self.nodes = nodes
        self.cache = cache

    @property
    def tier_aware(self) -> bool:
        return bool(self.core.enable_hicache) and self.cache is not None

    def root(self) -> RustNode:
        return self.nodes.root

    def pool_tokens(self) -> int:
        ctrl = getattr(self.cache, "cache_controller", None) if self.cache is not None else None
        if self.tier_aware and ctrl is not None:
            return int(ctrl.mem_pool_host.size)
        return self.device_pool_tokens()

    def protected_tokens(self, protected: Iterable[RustNode]) -> int:
        if self.tier_aware:
            return sum(n.length for n in protected)
        return self.core.protected_size()

    def device_pool_tokens(self) -> int:
        alloc = getattr(self.cache, "token_to_kv_pool_allocator", None)
        return int(alloc.size) if alloc is not None else 0

    def device_held_tokens(self, protected: Iterable[RustNode]) -> int:
        if self.tier_aware:
            return sum(n.length for n in protected if not n.evicted and not n.backuped)
        return self.protected_tokens(protected)

    def backup_path(self, node: RustNode) -> bool:
        """Backs up the root->node path parent-first (host-backed nodes form a prefix from the
        root). False when the host could not take it."""
        for info in self.core.collect_path_info([node.id])[0]:
            if info.full_value_len is None or self.core.is_backuped(info.node_id):
                continue
            if not self.cache.backup_node_for_write_back(info.node_id):
                self.cache.evict_host(info.path_end - info.path_start)
                if not self.cache.backup_node_for_write_back(info.node_id):
                    return False
        return True

    def protect(self, node: RustNode):
        if self.tier_aware:
            self.backup_path(node)
            if not self.nodes.alive(node.id):  # making host room can cascade
                return None
            return self.core.inc_host_lock_ref(node.id).to_dec_params()
        return self.core.inc_lock_ref(node.id).to_dec_params()

    def release(self, node: RustNode, receipt) -> None:
        if self.tier_aware:
            self.core.dec_host_lock_ref(node.id, receipt)
        else:
            self.core.dec_lock_ref(node.id, receipt)

    def tiers(self, node: RustNode) -> List[str]:
        out = []
        if not node.evicted:
            out.append("GPU")
        if node.backuped:
            out.append("CPU_PINNED")
        return out

    def flush_unpinned(self) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        before = self.core.evictable_size()
        self.cache.evict(EvictParams(num_tokens=max(before, 1)))
        if self.tier_aware:
            self.cache.evict_host(self.cache.cache_controller.mem_pool_host.size)
        return before - self.core.evictable_size()


class DeviceView:
    """The device tier as one walk saw it: which slots are unlocked, which slot follows which."""

    def __init__(self, core: Any):
        import torch

        self._torch = torch
        self.core = core
        every = core.walk_for_kv_canary(False, False)
        self.slots, self.prev = every.slot_indices, every.prev_slot_indices
        self.unlocked = core.walk_for_kv_canary(True, False).slot_indices

    def _value(self, node: RustNode):
        return self.core.get_component_device_value(node.id, FULL)

    def locked(self, node: RustNode) -> bool:
        """A device lock on the node (a request, an in-flight write-through, a load-back)."""
        v = self._value(node)
        if v is None or v.numel() == 0:
            return False
        return not bool(self._torch.isin(v[:1], self.unlocked).item())

    def resident_children(self, node: RustNode) -> int:
        """How many children of the node hold KV on the device."""
        v = self._value(node)
        if v is None or v.numel() == 0:
            return 0
        return int((self.prev == v[-1]).sum().item())

    def first_slot(self, node: RustNode):
        v = self._value(node)
        return None if v is None or v.numel() == 0 else int(v[0].item())
