"""Prune (a rewrite drops a branch) and Think (reasoning blocks: transient, or purged now)."""
from __future__ import annotations

from typing import Dict, List

from .. import tiers as T
from ..ack import Ack
from ..codec import Command
from .context import CommandContext, Found, bump, depth, status_of
from .residency import purge


class PruneThinkCommands:
    types = ("Prune", "Think")

    def __init__(self, ctx: CommandContext):
        self.ctx = ctx

    def run(self, cmd: Command) -> Ack:
        return self.prune(cmd) if cmd.type == "Prune" else self.think(cmd)

    def prune(self, cmd: Command) -> Ack:
        st = self.ctx.state  # Prune and Think(transient=false) also run on a plain RadixCache
        h = cmd.fields["after_block_hash"]
        node = st.moves.node_ending_at(self.ctx.cache, st, h)
        if node is None:
            return Ack(type="Prune", status="noop", requested=1, missing=[h],
                       reason="after_block_hash: not held by this worker")
        force = bool(cmd.fields["force"])
        p = purge(self.ctx, st, [node], include_self=False, force=force)
        ack = Ack(type="Prune", status=status_of(p.affected, p.skipped, []), requested=1,
                  affected=p.affected, skipped=p.skipped, tiers=p.tiers,
                  detail={"skipped_tiers": p.skipped_tiers})
        if p.skipped:
            ack.reason = f"skipped {p.skipped} pinned or in-use block(s)" + ("" if force else " (force=false)")
        return ack

    def _run_starts(self, st, found: Found) -> List:
        """The nodes the listed blocks start: each listed block begins its own node (what follows
        it in the node is its suffix); a block whose predecessor in the node is listed too is in
        the same run, so one split serves both."""
        nodes = {}
        listed = {h for h, _ in found.pairs}
        for h, n0 in found.pairs:
            own = getattr(n0, "kvctl_hashes", None) or ()
            i = n0.kvctl_hashes.index(h) if h in own else 0
            if i > 0 and n0.kvctl_hashes[i - 1] in listed:
                continue
            n = st.moves.node_starting_at(self.ctx.cache, st, h)
            if n is not None:
                nodes[id(n)] = n
        return list(nodes.values())

    def think(self, cmd: Command) -> Ack:
        transient = cmd.fields["transient"]
        st = self.ctx.unified(cmd) if transient else self.ctx.state
        hashes = cmd.fields["block_hashes"]
        found = self.ctx.lookup(st, hashes)
        starts = self._run_starts(st, found)
        if transient:
            return self._mark_transient(st, hashes, found, starts)
        p = purge(self.ctx, st, starts, include_self=True, force=False)
        return Ack(type="Think", status=status_of(p.affected, p.skipped, found.missing),
                   requested=len(hashes), affected=p.affected, skipped=p.skipped,
                   missing=found.missing, tiers=p.tiers, detail={"skipped_tiers": p.skipped_tiers},
                   reason=f"skipped {p.skipped} pinned or in-use block(s)" if p.skipped else None)

    def _mark_transient(self, st, hashes, found: Found, starts) -> Ack:
        """Marks the listed blocks and everything below them (their suffixes) transient and takes
        their KV off the host tier (at once, or when an in-flight backup lets go)."""
        tiers: Dict[str, int] = {}
        nodes = list({id(x): x for n in starts for x in T.subtree_leaves_first(n)}.values())
        for n in nodes:
            n.kvctl_transient = True
        if nodes:
            st.has_transient = True
        root = st.ops.root()
        for n in sorted(nodes, key=lambda n: -depth(n)):
            if st.index.reachable(n, root) and not self._release_transient_host(st, n, tiers):
                st.transient_host_pending[id(n)] = n
        affected = len(found.pairs)
        pending = len(st.transient_host_pending)
        return Ack(type="Think", status=status_of(affected, 0, found.missing), requested=len(hashes),
                   affected=affected, missing=found.missing, tiers=tiers,
                   reason=(f"{pending} node(s) held by an in-flight backup: their host copies go "
                           "as soon as it completes") if pending else None)

    def _release_transient_host(self, st, n, tiers: Dict[str, int]) -> bool:
        """Takes a transient node's KV off the host tier; False while an in-flight backup holds it."""
        if n.evicted:
            # only on host already: transient KV may not live there; it goes now
            p = purge(self.ctx, st, [n], include_self=True, force=False)
            for t, c in p.tiers.items():
                tiers[t] = tiers.get(t, 0) + c
            return p.skipped == 0
        if not n.backuped:
            return True
        if T.drop_host_copy(self.ctx.cache, n):  # already written through: take it back
            bump(tiers, ["CPU_PINNED"], len(n.kvctl_hashes))
            return True
        return False

    def retry_transient_host_releases(self) -> int:
        """Scheduler tick: retry the host releases Think(transient=true) could not do at once.
        Returns how many nodes are still pending."""
        st = self.ctx.state
        root = st.ops.root()
        for key, n in sorted(st.transient_host_pending.items(), key=lambda kv: -depth(kv[1])):
            gone = not st.index.reachable(n, root) or not getattr(n, "kvctl_transient", False)
            if gone or self._release_transient_host(st, n, {}):
                del st.transient_host_pending[key]
        return len(st.transient_host_pending)
