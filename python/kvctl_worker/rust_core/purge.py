"""Removing nodes from every tier on a Rust core (Prune, Think's purge, RevokeLease with purge):
what tiers.purge_leaf and residency.purge do on the Python core, with the adapter's own steps.

The adapter frees one named node's device copy (``demote``; ``drop_subtree_no_host`` for a leaf
with no host copy), but its only host-freeing step is ``drive_host_eviction``, whose victims the
host LRU picks among the evictable host leaves (host-only, childless, no host lock) and, under
write_back, the host duplicates without a host lock. So for the length of a purge every node
holding a host copy is host-locked (``HostLocks``), and one node leaves the host by unlocking it
alone and asking ``drive_host_eviction`` for its tokens: it is the only candidate, and its parent,
which becomes a leaf after it, is still locked. What SGLang itself holds a host lock for is read
from the cache's in-flight operations (a storage backup, a storage prefetch's anchor, a load-back),
so a node is never demoted and then left on the host by a lock kvctl did not see.

Splitting a node at a block goes through ``match_prefix`` over the path to that block (the
adapter has no other split): it refreshes that prefix's LRU recency, as a request for it would.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .. import tiers as T
from .nodes import RustNode, RustNodes
from .ops import DeviceView, RustOps


class HostLocks:
    """Every node that holds a host copy, host-locked while a purge runs; ``release`` lets one
    go (the node about to leave the host)."""

    def __init__(self, nodes: RustNodes, core: Any):
        self.nodes = nodes
        self.core = core
        self.held: Dict[int, Any] = {}

    def __enter__(self) -> "HostLocks":
        found = self.nodes.resolve(list(self.nodes.blocks.cpu))
        for n in {n.id: n for n in found.values()}.values():
            if n.backuped:
                self.held[n.id] = self.core.inc_host_lock_ref(n.id).to_dec_params()
        return self

    def release(self, node_id: int) -> None:
        receipt = self.held.pop(node_id, None)
        if receipt is not None:
            self.core.dec_host_lock_ref(node_id, receipt)

    def __exit__(self, *exc) -> None:
        while self.held:
            node_id, receipt = self.held.popitem()
            self.core.dec_host_lock_ref(node_id, receipt)


def sglang_host_anchors(cache: Any) -> set:
    """The nodes SGLang's in-flight operations hold: a storage backup's and a storage prefetch's
    host lock, a load-back's anchor (device and host locks)."""
    out = {node_id for node_id, _ in getattr(cache, "ongoing_backup", {}).values()}
    out.update(p.anchor_node_id for p in getattr(cache, "ongoing_prefetch", {}).values()
               if p.anchor_lock_params is not None)
    out.update(lb.node_id for lb in getattr(cache, "ongoing_load_back", {}).values())
    return out


class RustPurge:
    """The purge half of RustMoves (``nodes``, ``ops`` and ``subtree`` come from it)."""

    nodes: RustNodes
    ops: RustOps
    _locks: Optional[HostLocks] = None
    _cache: Any = None

    def purging(self, cache: Any):
        self._cache = cache
        self._locks = HostLocks(self.nodes, self.ops.core) if self.ops.tier_aware else None
        return self._locks if self._locks is not None else _Nothing()

    def in_use(self, node: RustNode) -> bool:
        """A device lock (a request, an in-flight DMA, a Prefetch hold) or a load-back under way."""
        if node.id in sglang_host_anchors(self._cache):
            return True
        return not node.evicted and DeviceView(self.ops.core).locked(node)

    def host_locked(self, node: RustNode) -> bool:
        if node.id in sglang_host_anchors(self._cache):
            return True
        return self.ops.tier_aware and node.kvctl_receipt is not None

    def _has_children(self, node: RustNode) -> bool:
        self.nodes.resolve([])  # the index as the core is now (children purged before it)
        return bool(node.kvctl_hashes) and bool(self.nodes.blocks.children(node.kvctl_hashes[-1]))

    def purge_leaf(self, cache: Any, node: RustNode) -> Optional[List[str]]:
        """tiers.purge_leaf: a childless, unlocked node leaves every tier. Returns the tiers it
        left, or None when it could not go (and then nothing changed)."""
        if node is self.nodes.root or self._has_children(node) or self.in_use(node):
            return None
        if self.host_locked(node):
            return None
        evicted, backuped = node.evicted, node.backuped
        if evicted and not backuped:
            return None
        tiers = T.tier_names(node)
        if not backuped:
            result = self.ops.core.drop_subtree_no_host(node.id)
            cache._apply_eviction_result(result)
            return tiers if result.is_dropped else None
        if not evicted:
            if DeviceView(self.ops.core).resident_children(node):
                return None
            cache._demote(node.id, {ct: 0 for ct in cache.tree_components})
        self._locks.release(node.id)
        cache.evict_host(node.length)
        if self.nodes.alive(node.id):
            raise RuntimeError(f"kvctl: host eviction of Rust core node {node.id} freed another node")
        return tiers

    # ---- splits -------------------------------------------------------------------------------
    def _split_after(self, cache: Any, h: int) -> Optional[RustNode]:
        """The node whose last page is block ``h``, split there by the core's own match."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        nodes = self.nodes
        node = nodes.get(h)
        if node is None or node.kvctl_hashes[-1] == h:
            return node
        chain = nodes.blocks.chain(h)
        key = nodes._key(h, nodes.blocks.tokens_of(chain))
        result = self.ops.core.match_prefix(MatchPrefixParams(key=key))
        cache._apply_cache_actions(result.cache_actions)
        return nodes.get(h)

    def node_ending_at(self, cache: Any, _st, h: int) -> Optional[RustNode]:
        return self._split_after(cache, h)

    def node_starting_at(self, cache: Any, _st, h: int) -> Optional[RustNode]:
        node = self.nodes.get(h)
        if node is None or node.kvctl_hashes[0] == h:
            return node
        self._split_after(cache, self.nodes.blocks.parent(h))
        return self.nodes.get(h)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
