"""Tier moves of the command families on a Rust core: what tiers.py does on the Python core with
the core's internals, done with the adapter's steps (``demote``) and the cache's own methods
(``backup_node_for_write_back``, ``load_back``, ``match_prefix``), each checked first against a
``DeviceView`` (a locked or inner node would make the Rust core panic)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .nodes import RustNode, RustNodes
from .ops import DeviceView, RustOps
from .purge import RustPurge


def _depth(node: RustNode) -> int:
    return node.end


class RustMoves(RustPurge):
    core = "rust"

    def __init__(self, nodes: RustNodes, ops: RustOps):
        self.nodes = nodes
        self.ops = ops

    # ---- offload: Pause and ToolStart -------------------------------------------------------
    def own_branch(self, nodes: List[RustNode], view: DeviceView) -> List[RustNode]:
        """residency._own_branch: the listed nodes whose GPU copies this path alone uses, deepest
        first, up to the first one another branch still hangs below on the GPU."""
        ordered = sorted(nodes, key=lambda n: -_depth(n))
        listed = {id(n) for n in ordered}
        own: List[RustNode] = []
        below: Optional[RustNode] = None
        for n in ordered:
            if below is not None and below.parent_id != n.id:
                break
            others = view.resident_children(n) - (0 if below is None or below.evicted else 1)
            if below is not None and others > 0:
                break
            if id(n) in listed:
                own.append(n)
            below = n
        return own

    def _device_subtree(self, node: RustNode) -> List[RustNode]:
        """The node and every descendant holding KV on the device, each after its descendants
        (the order tiers.subtree_leaves_first gives on the Python core)."""
        return self._subtree(node, device_only=True)

    def subtree(self, node: RustNode, include_self: bool) -> List[RustNode]:
        """tiers.subtree_leaves_first: the node and every descendant, on any tier."""
        out = self._subtree(node, device_only=False)
        return out if include_self else out[:-1]

    def _subtree(self, node: RustNode, device_only: bool) -> List[RustNode]:
        blocks = self.nodes.blocks
        seen = {node.id: node}
        stack = [(node, False)]
        out: List[RustNode] = []
        while stack:
            n, done = stack.pop()
            if done:
                out.append(n)
                continue
            stack.append((n, True))
            if not n.kvctl_hashes:
                continue
            kids = blocks.children(n.kvctl_hashes[-1])
            if device_only:
                kids = [k for k in kids if blocks.tiers(k)[0]]
            for h, child in self.nodes.resolve(kids).items():
                if child.id not in seen and child.parent_id == n.id:
                    seen[child.id] = child
                    stack.append((child, False))
        return out

    def demote_subtree(self, cache: Any, node: RustNode, view: DeviceView) -> Tuple[list, list]:
        """tiers.demote_subtree: GPU -> host for the node and its resident descendants, each
        backed up first; a node in use (or below one kept) keeps its ancestors on the GPU."""
        demoted, skipped, blocked = [], [], set()
        left: dict = {}  # node id -> its children this pass demoted
        for n in self._device_subtree(node):
            if n.evicted:
                continue
            inner = view.resident_children(n) > left.get(n.id, 0)
            if n.id in blocked or inner or view.locked(n) or not self.ops.backup_path(n):
                skipped.append(n)
                blocked.update(a.id for a in _ancestors(n))
                continue
            cache._demote(n.id, {ct: 0 for ct in cache.tree_components})
            demoted.append(n)
            left[n.parent_id] = left.get(n.parent_id, 0) + 1
        return demoted, skipped

    def demote_own_branch(self, cache: Any, nodes: List[RustNode]) -> int:
        """Offload's second half: the own branch's held nodes leave the GPU. Returns how many
        listed nodes had to stay (in use)."""
        view = DeviceView(self.ops.core)
        skipped = 0
        for n in self.own_branch(nodes, view):
            if not n.evicted and n.pin_count:
                _, sk = self.demote_subtree(cache, n, view)
                skipped += sum(1 for x in sk if x is n)
                view = DeviceView(self.ops.core)
        return skipped

    # ---- Prefetch ------------------------------------------------------------------------------
    def taken_over(self, cache: Any, hold) -> bool:
        """Whether another holder (the request a Prefetch was for) locks the node too: release
        the prefetch's lock and see whether the node stays locked; if not, take it again."""
        core = self.ops.core
        before = core.full_protected_size()
        cache.dec_lock_ref(hold.node.id, hold.params)
        if core.full_protected_size() == before:
            return True
        hold.params = cache.inc_lock_ref(hold.node.id).to_dec_params()
        return False

    # ---- Warm ----------------------------------------------------------------------------------
    def known_tokens(self, _cache: Any, keys: List[str]) -> Optional[List[int]]:
        """The tokens of the path whose storage keys are ``keys`` from its first page, when the
        tree holds it (its event hashes are the keys' int64 when no namespace seeds them)."""
        from sglang.srt.mem_cache.utils import hash_str_to_int64

        blocks = self.nodes.blocks
        self.nodes.resolve([])  # drain the core's events first
        last = hash_str_to_int64(keys[-1])
        chain = blocks.chain(last) if last in blocks else None
        if chain is None or len(chain) != len(keys):
            return None
        return blocks.tokens_of(chain)

    def anchor(self, _cache: Any, match, _tokens: List[int]) -> Tuple[RustNode, int]:
        """The node a Warm's match ended at (split at the page edge by the match itself) and the
        tokens the tree holds up to it."""
        node_id = match.best_match_node
        if self.ops.core.is_root(node_id):
            return self.nodes.root, 0
        n = self.nodes.by_id(node_id)
        return n, n.end

    def node(self, _cache: Any, node_id: int) -> RustNode:
        return self.nodes.by_id(node_id)


def _ancestors(node: RustNode):
    cur = node.parent
    while cur is not None and cur.parent is not None:
        yield cur
        cur = cur.parent
