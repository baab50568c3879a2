"""Entry points the SGLang hook patches call. Each takes the tree object the hook sits in
(RadixCache, or the UnifiedTreeCore of a UnifiedRadixCache) and never raises into SGLang for
bookkeeping it cannot do: a node it cannot hash is simply not indexed."""
from __future__ import annotations

import logging
import os
from typing import Any

from .hashes import published_hashes
from .index import BlockHashIndex
from .pins import PinManager
from .sessions import Sessions
from .trees import RadixOps, UnifiedOps

logger = logging.getLogger(__name__)
DEFAULT_BUDGET = float(os.environ.get("KVCTL_PIN_BUDGET_FRACTION", "0.5"))


class KvctlState:
    def __init__(self, tree: Any):
        self.tree = tree
        self.index = BlockHashIndex(tree.page_size)
        ops = UnifiedOps(tree) if hasattr(tree, "node_by_id") else RadixOps(tree)
        self.pins = PinManager(self.index, ops, budget_fraction=DEFAULT_BUDGET)
        self.sessions = Sessions(self.pins)
        # Transient nodes whose host copy could not go yet (an in-flight write-through or storage
        # backup held it when Think arrived): the scheduler tick retries until it is gone.
        self.transient_host_pending: dict = {}

    @property
    def ops(self):
        return self.pins.ops


def state_of(tree: Any) -> KvctlState:
    st = tree.__dict__.get("_kvctl")
    if st is None:
        st = KvctlState(tree)
        tree.__dict__["_kvctl"] = st
    return st


def state_for_cache(cache: Any) -> KvctlState:
    """From the scheduler's tree_cache (RadixCache or UnifiedRadixCache)."""
    core = getattr(cache, "tree_core", None)
    if core is None:
        return state_of(cache)
    st = state_of(core)
    st.ops.cache = cache
    return st


def on_node_added(tree: Any, node: Any) -> None:
    st = state_of(tree)
    try:
        st.index.add(node, published_hashes(tree.kv_events, node))
    except Exception:  # pragma: no cover - never break the serving path
        logger.exception("kvctl: could not index node %s", getattr(node, "id", "?"))
    node.pin_count = getattr(node, "pin_count", 0)
    parent = getattr(node, "parent", None)
    if parent is not None and getattr(parent, "kvctl_transient", False):
        node.kvctl_transient = True  # what follows transient KV is unusable without it too


def on_split(tree: Any, new_node: Any, child: Any, split_len: int) -> None:
    st = state_of(tree)
    st.index.split(new_node, child, split_len)
    new_node.kvctl_receipt = None
    new_node.pin_count = 0
    # a transient node's halves are both transient (split slices, never rehashes)
    new_node.kvctl_transient = getattr(child, "kvctl_transient", False)
    st.pins.recount(new_node)
    st.pins.recount(child)


def on_node_removed(tree: Any, node: Any) -> None:
    st = state_of(tree)
    st.index.remove(node)
    if getattr(node, "pin_count", 0):
        st.pins.forget(node)


def on_reset(tree: Any) -> None:
    st = state_of(tree)
    st.index.clear()
    st.pins.clear()
    st.sessions.clear()


def requires_python_tree_core() -> bool:
    """The pin hooks live in the Python UnifiedTreeCore; the Rust core has none. Set
    KVCTL_DISABLE=1 to let SGLang pick its Rust core again (pins then unavailable)."""
    return os.environ.get("KVCTL_DISABLE") != "1"


def is_transient(node: Any) -> bool:
    """Think(transient=true) marked it: never written to host or storage, evicted first."""
    return bool(getattr(node, "kvctl_transient", False))


def skip_backup(cache: Any, node_id: Any) -> bool:
    """Patch 0007: write-through / write-back / storage backups skip transient nodes."""
    try:
        node = cache.tree_core.node_by_id(node_id)
        return is_transient(node) or is_transient(getattr(node, "parent", None))
    except Exception:  # pragma: no cover
        return False


def evict_transient_first(cache: Any, tracker: dict) -> None:
    """Patch 0007: before SGLang's LRU walk, device eviction drops unlocked transient nodes
    (leaves first), counted in the walk's tracker."""
    core = getattr(cache, "tree_core", None)
    if core is None or not core.__dict__.get("_kvctl_has_transient"):
        return
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    from . import tiers

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
    core.__dict__["_kvctl_has_transient"] = any_left
