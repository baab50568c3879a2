"""BlockHashIndex: published int64 block hash -> tree node.

Every node carries ``kvctl_hashes`` (its pages' published hashes, in order). The index is kept
right on insert, split (the prefix's hashes are re-pointed to the new parent),
removal from the tree (GPU eviction that keeps a host copy keeps the node, so the entry stays) and
reset. A lookup also checks that the node is still reachable from the root (a
deleted node's ``value`` is not reset, so its flags lie).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional


class BlockHashIndex:
    def __init__(self, page_size: int):
        self.page_size = page_size
        self._map: Dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._map)

    def items(self):
        return self._map.items()

    def add(self, node: Any, hashes: List[int]) -> None:
        node.kvctl_hashes = list(hashes)
        for h in hashes:
            self._map[h] = node

    def remove(self, node: Any) -> List[int]:
        hashes = getattr(node, "kvctl_hashes", None) or []
        for h in hashes:
            if self._map.get(h) is node:
                del self._map[h]
        return hashes

    def split(self, new_parent: Any, child: Any, split_len: int) -> None:
        hashes = getattr(child, "kvctl_hashes", None)
        if hashes is None:
            return
        n = -(-split_len // self.page_size)
        new_parent.kvctl_hashes, child.kvctl_hashes = hashes[:n], hashes[n:]
        for h in new_parent.kvctl_hashes:
            self._map[h] = new_parent

    def clear(self) -> None:
        self._map.clear()

    def reachable(self, node: Any, root: Any, known: Optional[Dict[int, Any]] = None) -> bool:
        """Whether ``node`` still hangs from ``root``. ``known`` carries the nodes already found
        reachable by earlier calls of one operation that does not change the tree in between (a
        lookup's hashes mostly share one path): a walk stops at the first of them."""
        path = []
        cur = node
        while cur is not root:
            if known is not None and id(cur) in known:
                break
            parent = cur.parent
            if parent is None or cur.key is None:
                return False
            if parent.children.get(self._child_key(cur)) is not cur:
                return False
            path.append(cur)
            cur = parent
        if known is not None:
            for n in path:
                known[id(n)] = n
        return True

    def _child_key(self, node: Any):
        """The key ``node`` sits under in its parent's children. Computed once per key object: a
        split gives the node a new key (a slice), and a key is never changed in place (the
        parent's dict is keyed by it)."""
        key = node.key
        memo = getattr(node, "kvctl_child_key", None)
        if memo is not None and memo[0] is key:
            return memo[1]
        ck = key.child_key(self.page_size)
        node.kvctl_child_key = (key, ck)
        return ck

    def get(self, h: int, root: Any, known: Optional[Dict[int, Any]] = None) -> Optional[Any]:
        node = self._map.get(h)
        if node is None:
            return None
        if known is not None and id(node) in known:
            return node  # found reachable earlier in the same operation
        if not self.reachable(node, root, known):
            self.remove(node)
            return None
        return node

    def lookup(self, hashes: Iterable[int], root: Any):
        """(hash, node) for the hashes whose node is still in the tree, in order, and the other
        hashes. A path's hashes mostly share a few nodes: one known reachable answers at once."""
        found, missing = [], []
        known: Dict[int, Any] = {}
        get = self._map.get
        for h in hashes:
            node = get(h)
            if node is not None and (id(node) in known or self.reachable(node, root, known)):
                found.append((h, node))
                continue
            if node is not None:
                self.remove(node)
            missing.append(h)
        return found, missing
