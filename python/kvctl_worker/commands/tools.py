"""ToolStart (offload a session's KV to host for a tool call) and ToolEnd (restore it, by epoch)."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from .. import tiers as T
from ..ack import Ack
from ..codec import Command, CommandError
from .context import CommandContext, status_of
from .residency import offload


@dataclasses.dataclass
class Restore:
    """What a ToolEnd load did: the blocks still in the tree, those gone, and why it stopped:
    ``refused`` when SGLang declined a load (the engine clipping advice: no room now), ``failure``
    when one raised."""
    pairs: List[tuple]
    missing: List[int]
    failure: Optional[str] = None
    refused: Optional[str] = None


class ToolCommands:
    types = ("ToolStart", "ToolEnd")

    def __init__(self, ctx: CommandContext):
        self.ctx = ctx

    def run(self, cmd: Command) -> Ack:
        return self.start(cmd) if cmd.type == "ToolStart" else self.end(cmd)

    def start(self, cmd: Command) -> Ack:
        st = self.ctx.host_tier(cmd)
        sid, hashes = cmd.fields["session_id"], cmd.fields["block_hashes"]
        found = self.ctx.lookup(st, hashes)
        hold = st.sessions.start_tool(sid, found.hashes)
        off = offload(self.ctx, st, found, "tool:" + sid)
        status = status_of(off.affected, off.skipped, found.missing) if found.pairs else "noop"
        return Ack(type="ToolStart", status=status, requested=len(hashes), affected=off.affected,
                   skipped=off.skipped, missing=found.missing,
                   tiers=self.ctx.tiers_of(st, found.pairs), epoch=hold.epoch, reason=off.held.reason)

    def _restore(self, st, hashes) -> Restore:
        # stale session -> node mappings: the index answers only for nodes still in the tree
        try:
            pairs, missing = st.index.lookup(hashes, st.ops.root())
            for h, n in reversed(pairs):  # the path's last block last: load the deepest
                if n.evicted and not T.load_path(self.ctx.cache, n):
                    return Restore(pairs, missing, refused=f"SGLang's load_back of block {h} refused "
                                   "(device pool full, or no free load-back slot)")
            return Restore(pairs, missing)
        except Exception as e:
            return Restore([], [], f"{type(e).__name__}: {e}")

    def end(self, cmd: Command) -> Ack:
        st = self.ctx.unified(cmd)
        sid, epoch = cmd.fields["session_id"], cmd.fields["epoch"]
        hold = st.sessions.tools.get(sid)
        if hold is None:
            raise CommandError("command.session_id", f"no tool offload in flight for session {sid!r}")
        if epoch != hold.epoch:
            raise CommandError("command.epoch", f"stale epoch {epoch} (current {hold.epoch})")
        try:
            r = self._restore(st, hold.hashes)
        finally:
            st.sessions.end_tool(sid)  # the host protection goes whatever happened
        if r.failure is not None:
            return Ack(type="ToolEnd", status="error", requested=len(hold.hashes), epoch=epoch,
                       missing=r.missing, reason=f"restore failed: {r.failure}; host protection "
                       "released, blocks stay on host as ordinary cache")
        on_host = sum(1 for _, n in r.pairs if n.evicted)
        # blocks left on host are the restore clipped, never a no-op: the protection did go
        status = "noop" if not r.pairs else "partial" if (on_host or r.missing) else "applied"
        reason = None
        if r.refused is not None:
            reason = (f"{r.refused}: {on_host} block(s) stay on host as ordinary cache; "
                      "host protection released")
        return Ack(type="ToolEnd", status=status, requested=len(hold.hashes),
                   affected=len(r.pairs) - on_host, skipped=on_host, missing=r.missing,
                   tiers=self.ctx.tiers_of(st, r.pairs), epoch=epoch, reason=reason)
