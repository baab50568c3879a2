"""Moving blocks between tiers for the families: purge subtrees, offload to host under a hold."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Set

from .. import tiers as T
from .context import CommandContext, Found


@dataclasses.dataclass
class Purged:
    """What a purge did: blocks removed and skipped, each counted per tier."""
    affected: int = 0
    skipped: int = 0
    tiers: Dict[str, int] = dataclasses.field(default_factory=dict)
    skipped_tiers: Dict[str, int] = dataclasses.field(default_factory=dict)

    def count(self, pages: int, names, skipped: bool) -> None:
        if skipped:
            self.skipped += pages
        else:
            self.affected += pages
        into = self.skipped_tiers if skipped else self.tiers
        for t in names:
            into[t] = into.get(t, 0) + pages


def _leaves_first(moves, roots, include_self: bool) -> List[Any]:
    order, seen = [], set()
    for r in roots:
        for n in moves.subtree(r, include_self):
            if id(n) not in seen:
                seen.add(id(n))
                order.append(n)
    return order


def purge(ctx: CommandContext, st, roots, include_self: bool, force: bool) -> Purged:
    """Remove the subtrees under ``roots`` from every tier, leaves first; pinned/held nodes
    skipped unless ``force``; in-use nodes always skipped, and so are their ancestors (a
    prefix never goes before its suffixes)."""
    root, mv = st.ops.root(), st.moves
    out = Purged()
    blocked: Set[int] = set()
    with mv.purging(ctx.cache):
        for n in _leaves_first(mv, roots, include_self):
            if not st.index.reachable(n, root):
                continue  # already gone with a tombstone cascade
            hashes = list(getattr(n, "kvctl_hashes", None) or ())
            pages = len(hashes) or 1
            names = T.tier_names(n)  # before the purge: a skipped node is counted where it was
            keep = id(n) in blocked or mv.in_use(n)
            if not keep and (getattr(n, "pin_count", 0) or mv.host_locked(n)):
                keep = not force
                if force:
                    st.pins.release_hashes(hashes)
            gone = None if keep else mv.purge_leaf(ctx.cache, n)
            if gone is None:
                out.count(pages, names, skipped=True)
                blocked.update(id(a) for a in T._ancestors(n, root))
            else:
                out.count(pages, gone, skipped=False)
    return out


@dataclasses.dataclass
class Offloaded:
    """A hold taken for an owner: the pins' result and the blocks that could not leave the GPU."""
    held: Any
    skipped: int

    @property
    def affected(self) -> int:
        return self.held.affected + self.held.noop


def offload(ctx: CommandContext, st, found: Found, owner: str) -> Offloaded:
    """Hold the host copies for ``owner`` (backs up first), then free the GPU copies of the
    path's own branch (shared ancestors keep theirs: other sessions stand on them)."""
    held = st.pins.hold(found.pairs, owner)
    skipped = held.skipped
    if ctx.cache.cache_controller is not None:
        skipped += st.moves.demote_own_branch(ctx.cache, found.nodes)
    return Offloaded(held, skipped)
