"""Per-node tier moves on SGLang 0.5.23's UnifiedRadixCache (Python tree core), each one going
through the core's own step functions so the KV events are exactly what SGLang emits for the
same move during its own eviction (``_demote`` -> BlockRemoved GPU, ``_evict_host_leaf`` ->
BlockRemoved CPU, ``_delete_unbacked_device_leaf`` -> BlockRemoved GPU, ``_release_full_host_duplicate``
-> BlockRemoved CPU, ``commit_backup``+``finish_write_through`` -> BlockStored CPU,
``commit_load_back`` -> BlockStored GPU). Freed device/host values are drained by the cache's own
``_free_values`` / ``_apply_cache_actions`` (no host buffer is ever left behind).

Everything here runs on the scheduler thread, synchronously (backup acks drained by
``backup_node_for_write_back``; loads completed by ``loading_check`` before returning), so no other
tree operation can observe a half-moved node (defects 2 and 7).
"""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Iterable, List, Optional


def _run_steps(cache, node, *steps) -> None:
    """Run the core's step functions on ``node`` with fresh accumulators and tracker, then let
    the cache drain what they freed (even if a step raises)."""
    dev, host, actions = defaultdict(list), defaultdict(list), []
    tracker = {ct: 0 for ct in cache.tree_components}
    try:
        for step in steps:
            step(node, tracker, dev, host, actions)
    finally:
        try:
            cache._free_values(dev, host)
        finally:
            cache._apply_cache_actions(actions)


def in_use(node) -> bool:
    """Held by a running request or an in-flight DMA (never overridden, not even by force)."""
    if not hasattr(node, "component_data"):
        # plain RadixCache: pins are lock-based too (one inc_lock_ref per pinned node, along its
        # root path), so a request holds the node iff its lock_ref exceeds the pins below it
        return node.lock_ref > sum(1 for n in subtree_leaves_first(node)
                                   if getattr(n, "kvctl_receipt", None) is not None)
    if any(cd.lock_ref > 0 for cd in node.component_data):
        return True
    return getattr(node, "write_through_pending_id", None) is not None or \
        getattr(node, "load_back_pending_id", None) is not None


def host_locked(node) -> bool:
    if not hasattr(node, "component_data"):
        return False  # no host tier
    return any(cd.host_lock_ref > 0 for cd in node.component_data)


def subtree_leaves_first(node, include_self: bool = True) -> List[Any]:
    """Post-order: every node after all of its descendants (a prefix never before its suffix)."""
    out: List[Any] = []
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if done:
            out.append(n)
            continue
        stack.append((n, True))
        for c in n.children.values():
            stack.append((c, False))
    if not include_self:
        out.pop()
    return out


def tier_names(node) -> List[str]:
    out = []
    if not node.evicted:
        out.append("GPU")
    if getattr(node, "backuped", False):
        out.append("CPU_PINNED")
    return out


def purge_leaf(cache, node) -> Optional[List[str]]:
    """Remove a childless, unlocked node from every tier. Returns the tiers it left, or None
    when it could not go (children, request lock, host lock, in-flight DMA)."""
    core = getattr(cache, "tree_core", None)
    if core is None:  # plain RadixCache: what its own evict() does for one leaf
        if node is cache.root_node or node.children or node.lock_ref > 0 or node.evicted:
            return None
        cache.token_to_kv_pool_allocator.free_segment(node.value, start_pos=0)
        cache._delete_leaf(node)
        cache.kv_events.record_remove(node)
        return ["GPU"]
    if node is core.root_node or node.children or in_use(node) or host_locked(node):
        return None
    if node.evicted and not node.backuped:
        return None
    tiers = tier_names(node)
    if node.evicted:
        _run_steps(cache, node, core._evict_host_leaf)
    elif not node.backuped:
        _run_steps(cache, node, core._delete_unbacked_device_leaf)
    else:
        _run_steps(cache, node, core._demote, core._evict_host_leaf)
    return tiers


def backup_path(cache, node) -> bool:
    """Back up the root->node path parent-first with SGLang's synchronous write-back primitive
    (host-backed nodes form a prefix from the root). False if the host could not take it."""
    core = cache.tree_core
    path = []
    cur = node
    while cur is not core.root_node:
        path.append(cur)
        cur = cur.parent
    for n in reversed(path):
        if n.backuped or n.evicted:
            continue
        if getattr(n, "kvctl_transient", False):
            return False
        if not cache.backup_node_for_write_back(n.id):
            cache.evict_host(len(n.key))
            if not cache.backup_node_for_write_back(n.id):
                return False
    return True


def demote_subtree(cache, node) -> tuple:
    """GPU -> host for ``node`` and every device-resident descendant (deepest first: a device
    node never sits below a host-only one). Each is backed up first. Returns (demoted nodes,
    skipped nodes)."""
    core = cache.tree_core
    demoted, skipped = [], []
    blocked = set()
    for n in subtree_leaves_first(node):
        if n.evicted:
            continue
        if getattr(n, "kvctl_transient", False) and id(n) not in blocked and n is not node:
            if purge_leaf(cache, n) is not None:  # transient below: never to host, it goes
                continue
        if id(n) in blocked or in_use(n) or not backup_path(cache, n):
            skipped.append(n)
            blocked.update(id(a) for a in _ancestors(n, core.root_node))
            continue
        _run_steps(cache, n, core._demote)
        demoted.append(n)
    return demoted, skipped


def drop_host_copy(cache, node) -> bool:
    """Free the host copy of a node that is also on the GPU (Think(transient=true) on a node the
    write-through policy already backed up). SGLang's own duplicate-release step."""
    core = cache.tree_core
    if node.evicted or not node.backuped or not core._can_reclaim_full_host_duplicate(node):
        return False
    # a host copy may only go if no descendant keeps one (host-backed nodes form a prefix)
    if any(c.backuped for c in node.children.values()):
        return False
    _run_steps(cache, node, core._release_full_host_duplicate)
    core.full_host_duplicates.pop(node.id, None)
    return True


def load_path(cache, node) -> bool:
    """Host -> GPU for the path to ``node`` through SGLang's load_back, completed before return
    (ready_to_load_host_cache + loading_check on this same thread)."""
    if not node.evicted:
        return True
    # SGLang skips host hits shorter than load_back_threshold (recompute is cheaper for a
    # request); an explicit restore wants them back, so lift it for this one synchronous call
    threshold = cache.load_back_threshold
    cache.load_back_threshold = 1
    try:
        if not cache.load_back(node.id, req=None):
            return False
    finally:
        cache.load_back_threshold = threshold
    if cache.ready_to_load_host_cache() == -1:
        return False
    for ack in list(cache.cache_controller.ack_load_queue):
        ack.finish_event.synchronize()
    cache.loading_check()
    return not node.evicted


def _ancestors(node, root) -> Iterable[Any]:
    cur = node.parent
    while cur is not None and cur is not root:
        yield cur
        cur = cur.parent


def _split(cache, st, node, pages: int):
    """Split ``node`` after ``pages`` pages with SGLang's own _split_node (what an insert does;
    no KV moves, no event: the hash lists are sliced). Returns the new parent (the prefix)."""
    core = getattr(cache, "tree_core", None)
    if core is None:
        return cache._split_node(node.key, node, pages * st.index.page_size)
    new_parent, action = core._split_node(node.key, node, pages * st.index.page_size)
    if action is not None:
        cache._apply_cache_actions([action])
    return new_parent


def node_starting_at(cache, st, h):
    """The node whose first page is block ``h`` (splitting if ``h`` is mid-node), or None."""
    node = st.index.get(h, st.ops.root())
    if node is None:
        return None
    i = node.kvctl_hashes.index(h)
    if i > 0:
        _split(cache, st, node, i)
    return node  # the original node keeps the suffix


def node_ending_at(cache, st, h):
    """The node whose last page is block ``h`` (splitting if ``h`` is mid-node), or None."""
    node = st.index.get(h, st.ops.root())
    if node is None:
        return None
    i = node.kvctl_hashes.index(h)
    if i < len(node.kvctl_hashes) - 1:
        return _split(cache, st, node, i + 1)
    return node


def own_branch(nodes: List[Any]) -> List[Any]:
    """The listed nodes whose GPU copies belong to this path alone, deepest first: from the
    deepest one up to (not including) the first that another branch still hangs below on the GPU.
    A device node never sits below a host-only one, so freeing a shared ancestor would free every
    other session continuing from it: those are held on host, but stay on the GPU."""
    ordered = sorted(nodes, key=lambda n: -_depth(n))
    listed = {id(n) for n in ordered}
    own: List[Any] = []
    below = None
    for n in ordered:
        if below is not None and below.parent is not n:
            break  # the listed blocks are not one path: keep to the deepest run of it
        if below is not None and any(c is not below and not c.evicted for c in n.children.values()):
            break
        if id(n) in listed:
            own.append(n)
        below = n
    return own


def _depth(node) -> int:
    d = 0
    while node.parent is not None:
        d += 1
        node = node.parent
    return d


class PythonMoves:
    """The tier moves of the command families on the Python core (the node objects' own steps,
    above); the Rust core's are rust_core.moves.RustMoves, with the same methods."""

    core = "python"

    @staticmethod
    def taken_over(cache, hold) -> bool:
        from .prefetch import release_if_locked_by_others

        return release_if_locked_by_others(cache, hold)

    @staticmethod
    def demote_own_branch(cache, nodes: List[Any]) -> int:
        """Offload's second half: the own branch's held nodes leave the GPU. Returns how many
        listed nodes had to stay (in use)."""
        skipped = 0
        for n in own_branch(nodes):
            if not n.evicted and n.pin_count:
                _, sk = demote_subtree(cache, n)
                skipped += sum(1 for x in sk if x is n)
        return skipped

    @staticmethod
    def known_tokens(cache, keys: List[str]):
        from .warm import _known_tokens

        return _known_tokens(cache.tree_core, keys, cache.page_size)

    @staticmethod
    def anchor(cache, _match, tokens: List[int]):
        from .warm import _walk

        return _walk(cache.tree_core, tokens, cache.page_size)

    @staticmethod
    def node(cache, node_id: int):
        return cache.tree_core.node_by_id(node_id)

    # ---- purge: Prune, Think, RevokeLease(purge) ------------------------------------------
    @staticmethod
    def purging(_cache):
        return contextlib.nullcontext()

    @staticmethod
    def subtree(node, include_self: bool) -> List[Any]:
        return subtree_leaves_first(node, include_self=include_self)

    in_use = staticmethod(in_use)
    host_locked = staticmethod(host_locked)
    purge_leaf = staticmethod(purge_leaf)
    node_ending_at = staticmethod(node_ending_at)
    node_starting_at = staticmethod(node_starting_at)
