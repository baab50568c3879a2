"""Pause (park blocks on host under a TTL lease), RenewLease, RevokeLease."""
from __future__ import annotations

from ..ack import Ack
from ..codec import Command, CommandError
from .context import CommandContext, depth, lease_dict, status_of
from .residency import offload, purge


class LeaseCommands:
    types = ("Pause", "RenewLease", "RevokeLease")

    def __init__(self, ctx: CommandContext):
        self.ctx = ctx

    def run(self, cmd: Command) -> Ack:
        if cmd.type == "Pause":
            return self.pause(cmd)
        if cmd.type == "RenewLease":
            return self.renew(cmd)
        return self.revoke(cmd)

    def pause(self, cmd: Command) -> Ack:
        st = self.ctx.host_tier(cmd)
        cache = self.ctx.cache
        hashes, lid = cmd.fields["block_hashes"], cmd.fields["lease_id"]
        found = self.ctx.lookup(st, hashes)
        if any(getattr(n, "kvctl_transient", False) for n in found.nodes):
            raise CommandError("command.block_hashes", "transient blocks cannot be paused to host")
        hold = st.sessions.lease(lid, found.hashes, cmd.fields["ttl_seconds"])
        off = offload(self.ctx, st, found, "lease:" + lid)
        if getattr(cache, "enable_storage", False):
            for n in sorted(found.nodes, key=depth):
                if n.backuped:
                    cache.write_backup_storage(n.id)
        ack = Ack(type="Pause", status=status_of(off.affected, off.skipped, found.missing),
                  requested=len(hashes), affected=off.affected, skipped=off.skipped,
                  missing=found.missing, tiers=self.ctx.tiers_of(st, found.pairs),
                  lease=lease_dict(hold), reason=off.held.reason)
        if not hold.hashes:
            st.sessions.leases.pop(lid, None)
        return ack

    @staticmethod
    def _lease_or_reject(st, lid: str):
        hold = st.sessions.leases.get(lid)
        if hold is None:
            raise CommandError("command.lease_id", f"unknown lease {lid!r}")
        return hold

    def renew(self, cmd: Command) -> Ack:
        st = self.ctx.state
        hold = self._lease_or_reject(st, cmd.fields["lease_id"])
        st.sessions.lease(hold.key, [], cmd.fields["new_ttl_seconds"])
        return Ack(type="RenewLease", status="applied", requested=len(hold.hashes),
                   affected=len(hold.hashes), lease=lease_dict(hold))

    def revoke(self, cmd: Command) -> Ack:
        st = self.ctx.unified(cmd)
        hold = self._lease_or_reject(st, cmd.fields["lease_id"])
        st.sessions.end_lease(hold.key)
        found = self.ctx.lookup(st, hold.hashes)
        if cmd.fields.get("purge") is False:
            # The hold goes, the blocks stay: the cache's own eviction decides (the session may return).
            return Ack(type="RevokeLease", status="applied", requested=len(hold.hashes),
                       affected=len(found.pairs), missing=found.missing,
                       tiers=self.ctx.tiers_of(st, found.pairs),
                       lease={"lease_id": hold.key, "expires_at_ms": None},
                       reason="lease released; blocks left to the cache's eviction")
        p = purge(self.ctx, st, found.nodes, include_self=True, force=False)
        sk = p.skipped
        return Ack(type="RevokeLease", status="applied" if not sk else "partial",
                   requested=len(hold.hashes), affected=p.affected, skipped=sk,
                   missing=found.missing, tiers=p.tiers,
                   lease={"lease_id": hold.key, "expires_at_ms": None},
                   detail={"skipped_tiers": p.skipped_tiers},
                   reason=f"lease released; {sk} block(s) held elsewhere or in use kept" if sk else None)
