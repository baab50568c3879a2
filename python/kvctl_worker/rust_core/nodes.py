"""Block hash -> node of a Rust tree core, through the adapter's own read-only calls.

A block's node is found from its token path (``blocks.BlockIndex``): ``match_full_device_prefix``
(read-only: no split, no LRU refresh) when the block is on the GPU; a host-only block is found
from the node a demote or a kvctl move left it in (``hint``), else with ``match_prefix`` over the
path extended to its end (no split; it refreshes that path's LRU recency, as a request would).
``collect_path_info`` then gives every node of the path with its token span, so one lookup
places every block of the path.

``RustNode`` is the handle kvctl keeps on a node, by NodeId: the per-node state the Python core
keeps on its TreeNode (``pin_count``, ``kvctl_receipt``, ``kvctl_hashes``) lives on it, so the pin
and hold bookkeeping (pins.py, sessions.py) runs unchanged. There is one handle per live node a
command touched; a node's id survives splits (the new node is the prefix: the parent), so a
split is seen as a handle whose span shrank (``RustNodes.refresh``).
"""
from __future__ import annotations

from array import array
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .blocks import BlockIndex


class RustNode:
    kvctl_transient = False  # Think (transient marks) runs on the Python core only

    def __init__(self, nodes: "RustNodes", node_id: int):
        self.nodes = nodes
        self.id = node_id
        self.start = 0  # token span on its root path: [start, end)
        self.end = 0
        self.parent_id: Optional[int] = None
        self.kvctl_hashes: List[int] = []
        self.pin_count = 0
        self.kvctl_receipt: Any = None

    def __repr__(self) -> str:
        return f"RustNode({self.id}, [{self.start}, {self.end}))"

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def parent(self):
        return self.nodes.node(self.parent_id) if self.parent_id is not None else None

    @property
    def evicted(self) -> bool:
        return self.nodes.core.is_full_device_evicted(self.id)

    @property
    def backuped(self) -> bool:
        return self.nodes.core.is_backuped(self.id)


class RustRoot(RustNode):
    @property
    def parent(self):
        return None

    @property
    def evicted(self) -> bool:
        return False

    @property
    def backuped(self) -> bool:
        return False


class RustNodes:
    """The block-hash index the command layer sees on a Rust core (the Python core's is
    index.BlockHashIndex): ``get`` / ``lookup`` / ``reachable`` / ``items`` / ``len``."""

    def __init__(self, core: Any, blocks: BlockIndex, sync):
        self.core = core
        self.blocks = blocks
        self.page_size = blocks.page_size
        self._sync = sync  # drains the core's event queue into ``blocks`` first
        self._handles: Dict[int, RustNode] = {}
        self.cache: Any = None  # the UnifiedRadixCache (for match_prefix's cache actions)
        self._root: Optional[RustRoot] = None  # read on first use: the core is still being built

    # ---- the index interface ----------------------------------------------------------------
    def __len__(self) -> int:
        self._sync()
        return len(self.blocks)

    def items(self):
        """(hash, None) for every block held: nodes are looked up on demand (``get``)."""
        self._sync()
        return ((h, None) for h in self.blocks.hashes())

    def get(self, h: int, _root=None, _known=None) -> Optional[RustNode]:
        # The core resolves a hash to its live node itself: no walk to memoize (`_known` is the
        # Python core's reachability memo, passed by callers that serve both cores).
        return self.resolve([h]).get(h)

    def lookup(self, hashes: Iterable[int], _root=None):
        hashes = list(hashes)
        got = self.resolve(hashes)
        found = [(h, got[h]) for h in hashes if h in got]
        return found, [h for h in hashes if h not in got]

    def reachable(self, node: RustNode, _root=None, _known=None) -> bool:
        return node is self.root or self.alive(node.id)

    def alive(self, node_id: int) -> bool:
        try:
            self.core.collect_path_info([node_id])
            return True
        except KeyError:
            return False

    @property
    def root(self) -> RustRoot:
        if self._root is None:
            self._root = RustRoot(self, self.core.root_node_handle())
        return self._root

    def clear(self) -> None:
        """Cache reset: a fresh root, no handle survives."""
        self._handles.clear()
        self._root = None

    # ---- handles ------------------------------------------------------------------------------
    def node(self, node_id: int) -> RustNode:
        if node_id == self.root.id:
            return self.root
        n = self._handles.get(node_id)
        if n is None:
            n = self._handles[node_id] = RustNode(self, node_id)
        return n

    def by_id(self, node_id: int) -> RustNode:
        """A handle on a node a step named (insert_host's new node), its span read now."""
        path = self.core.collect_path_info([node_id])[0]
        if not path:
            return self.root
        info = path[-1]
        n = self.node(node_id)
        n.start, n.end, n.parent_id = info.path_start, info.path_end, info.parent_id
        if not n.kvctl_hashes:
            n.kvctl_hashes = self._node_hashes(n)
        return n

    def forget_unheld(self) -> None:
        """Drops the handles no pin, hold or prefetch holds (they are made again on the next
        lookup), so the table stays as small as what kvctl holds."""
        for k in [k for k, n in self._handles.items() if n.kvctl_receipt is None and not n.pin_count]:
            del self._handles[k]

    # ---- lookups ------------------------------------------------------------------------------
    def resolve(self, hashes: Iterable[int]) -> Dict[int, RustNode]:
        """The node holding each block the index knows (deepest first: one path places all of
        its ancestors)."""
        self._sync()
        blocks = self.blocks
        want = [h for h in dict.fromkeys(hashes) if h in blocks]
        depth = self._depths(want)
        out: Dict[int, RustNode] = {}
        for h in sorted(want, key=lambda x: -depth[x]):
            if h in out:
                continue
            chain = blocks.chain(h)
            if chain is None:
                continue  # the path is cut (an ancestor left every tier): not in the tree
            path = self._path_of(h, chain)
            if path is None:
                continue
            for n in self._place_path(path, chain, len(chain)):
                for x in n.kvctl_hashes:
                    out.setdefault(x, n)
        return {h: out[h] for h in want if h in out}

    def _depths(self, hashes: List[int]) -> Dict[int, int]:
        blocks, depth = self.blocks, {}
        for h in hashes:
            trail = []
            cur = h
            while cur is not None and cur not in depth and cur in blocks:
                trail.append(cur)
                cur = blocks.parent(cur)
            d = depth.get(cur, -1) if cur is not None else -1
            for x in reversed(trail):
                d += 1
                depth[x] = d
        return depth

    def _key(self, h: int, tokens: list):
        from sglang.srt.mem_cache.radix_cache import RadixKey

        extra_key, cache_salt = self.blocks.namespace(h)
        return RadixKey(array("q", tokens), extra_key=extra_key, cache_salt=cache_salt)

    def _path_of(self, h: int, chain: List[int]) -> Optional[Tuple]:
        """The root path (collect_path_info) of a node at or below block ``h``."""
        tokens = self.blocks.tokens_of(chain)
        gpu, _cpu = self.blocks.tiers(h)
        if gpu:
            matched, node_id, _ = self.core.match_full_device_prefix(self._key(h, tokens))
            if matched >= len(tokens):
                return self.core.collect_path_info([node_id])[0]
        hint = self.blocks.host_node.get(h)
        if hint is not None:
            try:
                path = self.core.collect_path_info([hint])[0]
            except KeyError:
                del self.blocks.host_node[h]
            else:
                if path and path[-1].path_end >= len(tokens):
                    return path
        return self._matched_path(h, chain, tokens)

    def _matched_path(self, h: int, chain: List[int], tokens: list) -> Optional[Tuple]:
        """A host-only block no handle or hint reaches: the core's own match over the path,
        extended to the end of the record that stored the block (a node boundary), so that the
        match splits nothing."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        tokens = tokens + self.blocks.tokens_of(self.blocks.following(h, 1 << 30))
        result = self.core.match_prefix(MatchPrefixParams(key=self._key(h, tokens)))
        if self.cache is not None:
            self.cache._apply_cache_actions(result.cache_actions)
        path = self.core.collect_path_info([result.best_match_node])[0]
        if not path or path[-1].path_end < len(chain) * self.page_size:
            return None
        return path

    def _place_path(self, path: Tuple, chain: List[int], known: int) -> List[RustNode]:
        """Handles for the nodes of ``path`` (spans, parents, and their blocks' hashes as far as
        ``chain``, the hashes of the path's first ``known`` pages, and the index reach)."""
        ps = self.page_size
        out = []
        for info in path:
            first, last = info.path_start // ps, info.path_end // ps
            if first >= known:
                break  # below the block looked up: not placed
            n = self.node(info.node_id)
            n.start, n.end, n.parent_id = info.path_start, info.path_end, info.parent_id
            if last <= known:
                n.kvctl_hashes = chain[first:last]
            else:  # the node goes on past the block: its next blocks are the record's
                n.kvctl_hashes = chain[first:known] + self.blocks.following(chain[-1], last - known)
            out.append(n)
        return out

    def _node_hashes(self, n: RustNode) -> List[int]:
        """A node's blocks when no chain of this lookup reaches it: its own stored page hashes
        (published as they are when no namespace seeds them)."""
        from sglang.srt.mem_cache.utils import hash_str_to_int64

        out = []
        for v in self.core.get_hash_values(n.id) or ():
            h = hash_str_to_int64(v)
            if h in self.blocks:
                out.append(h)
        return out

    def refresh(self, handles: List[RustNode]) -> List[Tuple[RustNode, List[int]]]:
        """Re-reads the spans of ``handles`` (held nodes: alive). Returns each handle a split
        shortened, with the hashes that left it for a new parent node."""
        if not handles:
            return []
        paths = self.core.collect_path_info([n.id for n in handles])
        moved = []
        for n, path in zip(handles, paths):
            info = path[-1]
            if info.path_start != n.start:
                pages = (info.path_end - info.path_start) // self.page_size
                left = n.kvctl_hashes[:max(len(n.kvctl_hashes) - pages, 0)]
                n.kvctl_hashes = n.kvctl_hashes[len(left):]
                moved.append((n, left))
            n.start, n.end, n.parent_id = info.path_start, info.path_end, info.parent_id
        return moved
