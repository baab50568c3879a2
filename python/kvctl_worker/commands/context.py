"""What every command family shares: the cache, its kvctl state, lookups and the status rule."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

from .. import tiers as T
from ..codec import Command, CommandError
from ..hooks import state_for_cache


@dataclasses.dataclass
class Found:
    """Listed hashes the index holds (with their nodes), those it does not, and the distinct nodes."""
    pairs: List[tuple]
    missing: List[int]
    nodes: List[Any]

    @property
    def hashes(self) -> List[int]:
        return [h for h, _ in self.pairs]


def status_of(affected: int, skipped: int, missing: List[int]) -> str:
    """noop when nothing was done, partial when some blocks were skipped or missing, else applied."""
    if affected == 0:
        return "noop"
    return "partial" if (skipped or missing) else "applied"


def depth(node) -> int:
    d = 0
    while node.parent is not None:
        d += 1
        node = node.parent
    return d


def bump(tiers: Dict[str, int], names, by: int = 1) -> None:
    for t in names:
        tiers[t] = tiers.get(t, 0) + by


def lease_dict(hold) -> dict:
    return {"lease_id": hold.key, "expires_at_ms": hold.expires_at_ms}


@dataclasses.dataclass
class CommandContext:
    """The cache a handler serves; its kvctl state is looked up through the cache's observer on
    every use (the observer owns it; the handler keeps no copy)."""
    cache: Any

    @property
    def state(self):
        return state_for_cache(self.cache)

    def unified(self, cmd: Command):
        """The state, for commands that need a UnifiedRadixCache (a tree core with tiers)."""
        st = self.state
        if not hasattr(st.ops, "core") or getattr(self.cache, "tree_core", None) is None:
            raise CommandError("command.type", f"{cmd.type} needs a UnifiedRadixCache (this worker "
                               "runs a plain RadixCache)")
        return st

    def host_tier(self, cmd: Command):
        """The state, for Pause and ToolStart: a UnifiedRadixCache with HiCache (a host tier)."""
        st = self.unified(cmd)
        if not st.ops.tier_aware:
            raise CommandError("command.type", f"{cmd.type} needs HiCache (a host tier) on this worker")
        return st

    @staticmethod
    def lookup(st, hashes) -> Found:
        pairs, missing = st.index.lookup(hashes, st.ops.root())
        nodes = {id(n): n for _, n in pairs}
        return Found(pairs, missing, list(nodes.values()))

    @staticmethod
    def tiers_of(st, pairs) -> Dict[str, int]:
        """Per tier, how many of the listed blocks the index still holds there."""
        held = {h for h, _ in st.index.lookup([h for h, _ in pairs], st.ops.root())[0]}
        per_node: Dict[int, list] = {}  # a path's blocks share few nodes: each node's tiers once
        for h, n in pairs:
            if h in held:
                seen = per_node.get(id(n))
                if seen is None:
                    per_node[id(n)] = [n, 1]
                else:
                    seen[1] += 1
        out: Dict[str, int] = {}
        for n, count in per_node.values():
            bump(out, T.tier_names(n), count)
        return out
