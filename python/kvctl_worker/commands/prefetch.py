"""Prefetch: blocks parked on host back to the device before the request that will use them."""
from __future__ import annotations

from typing import Any, List

from .. import clock as clocks
from .. import tiers as T
from ..ack import Ack
from ..codec import Command, CommandError
from .context import CommandContext, depth


class PrefetchCommands:
    types = ("Prefetch",)

    def __init__(self, ctx: CommandContext, clock=clocks.monotonic):
        self.ctx = ctx
        self.clock = clock

    def _hashes(self, st, cmd: Command) -> List[int]:
        hashes = list(cmd.fields["block_hashes"])
        sid = cmd.fields["session_id"]
        if sid is not None:
            hold = st.sessions.tools.get(sid)
            if hold is None:
                raise CommandError("command.session_id", f"no tool offload in flight for session {sid!r}")
            listed = set(hashes)
            hashes += [h for h in hold.hashes if h not in listed]
        return hashes

    def run(self, cmd: Command) -> Ack:
        t0 = self.clock()
        st = self.ctx.host_tier(cmd)
        hashes = self._hashes(st, cmd)
        found = self.ctx.lookup(st, hashes)
        if found.missing:
            # every block must be known: a caller that names one the worker lost would otherwise
            # be told "resident" for a path the request cannot match past the gap
            i = hashes.index(found.missing[0])
            field = f"command.block_hashes[{i}]" if i < len(cmd.fields["block_hashes"]) else "command.session_id"
            raise CommandError(field, f"block {found.missing[0]} is not held by this worker (on neither tier)")
        deadline = t0 + cmd.fields["deadline_ms"] / 1000.0
        cache = self.ctx.cache
        before = {id(n) for n in found.nodes if n.evicted}
        refused = late = False
        # shallowest first: each load finds its ancestors resident and copies only its own node
        for n in sorted(found.nodes, key=depth):
            if not n.evicted:
                continue
            if self.clock() >= deadline:
                late = True
                break
            if not T.load_path(cache, n):
                refused = True
                break
        # what is resident now stays so until its request comes (or the short hold ends)
        st.prefetch.hold(cache, _deepest([n for n in found.nodes if not n.evicted]))
        return self._ack(st, cmd, hashes, found, before, refused, late)

    def _ack(self, st, cmd: Command, hashes, found, before, refused: bool, late: bool) -> Ack:
        on_host = sum(1 for _, n in found.pairs if n.evicted)
        affected = sum(1 for _, n in found.pairs if id(n) in before and not n.evicted)
        reason = None
        if on_host:
            why = (f"deadline {cmd.fields['deadline_ms']} ms passed" if late else
                   "SGLang's load_back refused (device pool full, or no free load-back slot)" if refused else
                   "not loaded")
            reason = f"{why}: {on_host} block(s) still on host only"
        status = "partial" if on_host else ("applied" if affected else "noop")
        return Ack(type="Prefetch", status=status, requested=len(hashes), affected=affected, skipped=on_host,
                   tiers=self.ctx.tiers_of(st, found.pairs), reason=reason)


def _deepest(nodes: List[Any]) -> List[Any]:
    """The nodes none of whose listed descendants are also listed: a lock on each covers the rest."""
    ids = {id(n) for n in nodes}
    covered = set()
    for n in nodes:
        p = n.parent
        while p is not None:
            if id(p) in ids:
                covered.add(id(p))
            p = p.parent
    return [n for n in nodes if id(n) not in covered]
