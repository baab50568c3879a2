"""What SGLang's UnifiedRadixCache calls (patch 0007), and the state lookups of the command
layer. The tree-level hooks are methods of the tree's observer (observer.py); these reach it from
the cache and return at once when kvctl is off."""
from __future__ import annotations

import logging
from typing import Any

from .observer import KvctlState, of

logger = logging.getLogger(__name__)


def state_of(tree: Any) -> KvctlState:
    """The kvctl state of a tree (or cache); raises when kvctl is off for it."""
    st = of(tree).state
    if st is None:
        raise RuntimeError("kvctl is off for this cache (no --kv-control-* flag)")
    return st


def state_for_cache(cache: Any) -> KvctlState:
    """From the scheduler's tree_cache (RadixCache or UnifiedRadixCache)."""
    st = state_of(cache)
    if getattr(cache, "tree_core", None) is not None:
        st.ops.cache = cache
        if hasattr(st.index, "cache"):
            st.index.cache = cache  # the Rust core's lookups apply match_prefix's cache actions
    return st


def is_transient(node: Any) -> bool:
    """Think(transient=true) marked it: never written to host or storage, evicted first."""
    return bool(getattr(node, "kvctl_transient", False))


def skip_backup(cache: Any, node_id: Any) -> bool:
    """Write-through / write-back / storage backups skip transient nodes."""
    st = of(cache).state
    if st is None or not st.has_transient:
        return False
    try:
        node = cache.tree_core.node_by_id(node_id)
        return is_transient(node) or is_transient(getattr(node, "parent", None))
    except Exception:  # pragma: no cover
        return False


def on_demoted(cache: Any, node_id: Any) -> None:
    """A device eviction step ran on the node (it demoted it to host, or deleted it). Without a
    host tier it deleted it: no block is left on the host to find again."""
    if getattr(cache, "host_pool_group", None) is not None:
        of(cache).on_host_node(node_id, "demoted")


def on_host_inserted(cache: Any, node_id: Any) -> None:
    """A storage prefetch inserted the node on the host tier."""
    if node_id is not None:
        of(cache).on_host_node(node_id, "inserted")


def evict_transient_first(cache: Any, tracker: dict) -> None:
    """Before SGLang's LRU walk, device eviction drops unlocked transient nodes (leaves first),
    counted in the walk's tracker."""
    st = of(cache).state
    if st is None or not st.has_transient:
        return
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    from . import tiers

    core = cache.tree_core
    any_left = False
    for node in tiers.subtree_leaves_first(core.root_node, include_self=False):
        if not is_transient(node):
            continue
        any_left = True
        if node.evicted:
            continue
        n = len(node.key)
        try:
            if tiers.purge_leaf(cache, node) is not None:
                tracker[ComponentType.FULL] = tracker.get(ComponentType.FULL, 0) + n
        except Exception:  # pragma: no cover - never break the serving path
            logger.exception("kvctl: transient eviction of node %s failed", getattr(node, "id", "?"))
    st.has_transient = any_left
