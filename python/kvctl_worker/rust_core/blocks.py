"""The blocks a Rust tree core holds, read from its own KV events.

The Rust core (``RustUnifiedTreeCore``) has no hook points: nodes are created, split and freed
inside the extension. What crosses the boundary is its event queue (``take_events``: the tagged
tuples its recorder turns into SGLang's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``),
which patch 0006 lets this index read on every drain.

A stored event is kept whole, as one record (its hashes, the parent of its first block, its
token list, its radix namespace ``(extra_key, cache_salt)``), and each of its blocks points at it
by identity (its position is looked up when a command reads it): the block's parent is the record's previous hash, its page the record's tokens at
that position. Every node of the tree lies inside the record of the event that stored it (a node
only ever shrinks, by splits), so the blocks after a block inside its node are the record's
next ones. Which tiers hold a block are two sets; a block leaves the index when its last tier
does. All of it is the events' own lists and C-level set and dict updates: the request path pays
for no per-block Python object.
"""
from __future__ import annotations

from collections import deque
from itertools import count, repeat
from typing import Dict, Iterator, List, Optional, Tuple

GPU = "GPU"
CPU = "CPU_PINNED"

# A record: (hashes, parent of hashes[0], token ids, (extra_key, cache_salt), positions). The
# positions ({hash: index}) are filled on a command's first read of the record, never on the
# request path.
Record = Tuple[list, Optional[int], list, tuple, dict]


def _at(rec: Record, h: int) -> int:
    pos = rec[4]
    if not pos:
        pos.update(zip(rec[0], count()))
    return pos[h]


class BlockIndex:
    def __init__(self, page_size: int):
        self.page_size = page_size
        self.where: Dict[int, Record] = {}  # hash -> the record that stored it last
        self.gpu: set = set()
        self.cpu: set = set()
        # host-only block -> a node at or below it that kvctl saw it in (demote, host insert)
        self.host_node: Dict[int, int] = {}
        # the last GPU removal and the last host store of the latest drain (their node's blocks)
        self.last_gpu_removed: list = []
        self.last_cpu_stored: list = []

    def __len__(self) -> int:
        return len(self.where)

    def __contains__(self, h: int) -> bool:
        return h in self.where

    def hashes(self) -> Iterator[int]:
        return iter(list(self.where))

    def clear(self) -> None:
        self.where.clear()
        self.gpu.clear()
        self.cpu.clear()
        self.host_node.clear()

    # ---- feeding --------------------------------------------------------------------------
    def feed(self, raw: list, events: list) -> None:
        """One drained batch: the core's tagged tuples and the events SGLang made of them (the
        published, namespaced hashes come from the latter, the namespace from the former)."""
        self.last_gpu_removed = self.last_cpu_stored = []
        for r, ev in zip(raw, events):
            tag = r[0]
            if tag == "block_stored":
                tier = self.gpu if r[5] == GPU else self.cpu if r[5] == CPU else None
                if tier is None:
                    continue  # an L3 / external copy: not a tier of the tree
                hashes = ev.block_hashes
                rec = (hashes, ev.parent_block_hash, ev.token_ids, (r[8], r[6]), {})
                self.where.update(dict.fromkeys(hashes, rec))
                tier.update(hashes)
                if tier is self.cpu:
                    self.last_cpu_stored = hashes
            elif tag == "block_removed":
                self._removed(ev.block_hashes, r[2])
            elif tag == "all_blocks_cleared":
                self.clear()

    def _removed(self, hashes: list, medium: str) -> None:
        if medium == GPU:
            tier, other = self.gpu, self.cpu
            self.last_gpu_removed = hashes
        elif medium == CPU:
            tier, other = self.cpu, self.gpu
        else:
            return
        tier.difference_update(hashes)
        gone = [h for h in hashes if h not in other] if other else hashes
        deque(map(self.where.pop, gone, repeat(None)), 0)  # C-level pops
        if self.host_node:
            deque(map(self.host_node.pop, gone, repeat(None)), 0)

    # ---- reading --------------------------------------------------------------------------
    def parent(self, h: int) -> Optional[int]:
        rec = self.where[h]
        i = _at(rec, h)
        return rec[0][i - 1] if i else rec[1]

    def namespace(self, h: int) -> tuple:
        return self.where[h][3]

    def note_host_node(self, hashes: list, node_id: int) -> None:
        """``node_id`` holds these blocks on the host only (kvctl's read-only way back to it)."""
        for h in hashes:
            if h in self.cpu and h not in self.gpu:
                self.host_node[h] = node_id

    def tiers(self, h: int) -> Tuple[bool, bool]:
        return h in self.gpu, h in self.cpu

    def chain(self, h: int) -> Optional[List[int]]:
        """The hashes from the first page of ``h``'s path to ``h``; None when the path is cut
        (an ancestor left every tier first: not a path of the tree)."""
        out = []
        cur: Optional[int] = h
        where = self.where
        while cur is not None:
            at = where.get(cur)
            if at is None:
                return None
            out.append(cur)
            i = _at(at, cur)
            cur = at[0][i - 1] if i else at[1]
        out.reverse()
        return out

    def tokens_of(self, chain: List[int]) -> list:
        ps, where = self.page_size, self.where
        out: list = []
        for h in chain:
            rec = where[h]
            i = _at(rec, h)
            out.extend(rec[2][i * ps:(i + 1) * ps])
        return out

    def following(self, h: int, pages: int) -> List[int]:
        """Up to ``pages`` blocks after ``h`` in the record that stored it, as far as they are
        still held: the rest of ``h``'s node, and what the node's suffixes held at that time."""
        rec = self.where[h]
        i = _at(rec, h)
        out = []
        for x in rec[0][i + 1:i + 1 + pages]:
            if x not in self.where:
                break
            out.append(x)
        return out

    def children(self, h: int) -> List[int]:
        """The held blocks whose parent is ``h``. Nothing keeps parent -> child links on the
        request path; they are read from the records now (a scan, for the rare command that
        needs a node's descendants)."""
        out: List[int] = []
        records = {id(rec): rec for rec in self.where.values()}
        for hashes, parent, _tokens, _ns, _pos in records.values():
            if parent == h:
                cand = hashes[0]
            else:
                try:
                    j = hashes.index(h)
                except ValueError:
                    continue
                if j + 1 >= len(hashes):
                    continue
                cand = hashes[j + 1]
            if cand not in out and cand in self.where and self.parent(cand) == h:
                out.append(cand)
        return out
