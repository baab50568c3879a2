"""Cache (pin/unpin) and the pin-aware flush."""
from __future__ import annotations

from ..ack import Ack
from ..codec import Command
from .context import CommandContext


class PinCommands:
    types = ("Cache",)

    def __init__(self, ctx: CommandContext):
        self.ctx = ctx

    def run(self, cmd: Command) -> Ack:
        hashes = cmd.fields["block_hashes"]
        pins = self.ctx.state.pins
        if cmd.fields["pin"]:
            r = pins.pin(hashes, cmd.fields.get("ttl_seconds"))
        else:
            r = pins.unpin(hashes)
        if r.affected == 0:
            status = "rejected" if r.skipped else "noop"
        elif r.skipped or r.missing or r.noop:
            status = "partial"
        else:
            status = "applied"
        return Ack(type="Cache", status=status, requested=len(hashes), affected=r.affected,
                   skipped=r.skipped + r.noop, missing=r.missing, reason=r.reason, tiers=r.tiers)

    def flush(self) -> Ack:
        """Pin-aware flush_cache: evict everything unpinned, keep pinned blocks (on host under
        HiCache) and their index entries."""
        st = self.ctx.state
        st.sync()
        st.pins.reap()
        evicted = st.ops.flush_unpinned()
        kept = sum(1 for pins in st.pins.records.values() if pins)
        return Ack(type=None, status="applied", affected=evicted, skipped=kept,
                   reason=f"kept {kept} pinned block(s)")
