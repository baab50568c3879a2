"""Commands -> tree operations -> Acks. Runs on the scheduler thread (design decision 1)."""
from __future__ import annotations

import time
from typing import Any, Optional

from .ack import Ack
from .codec import Command, CommandError, decode
from .hooks import state_for_cache
from .identity import get_worker_id

IMPLEMENTED = ("Cache", "Inspect")


class CommandHandler:
    def __init__(self, cache: Any, worker_id: Optional[str] = None):
        self.cache = cache
        self.worker_id = worker_id
        self.metrics = {"rejected": 0}

    @property
    def state(self):
        return state_for_cache(self.cache)

    def handle(self, body: Any) -> Ack:
        t0 = time.perf_counter()
        try:
            cmd = body if isinstance(body, Command) else decode(body)
        except CommandError as e:
            self.metrics["rejected"] += 1
            return self._done(Ack(type=_type_of(body), status="rejected", reason=str(e)), t0)
        if cmd.type not in IMPLEMENTED:
            self.metrics["rejected"] += 1
            ack = Ack(type=cmd.type, status="rejected", reason=f"type: {cmd.type} not supported by this worker yet")
        elif cmd.type == "Cache":
            ack = self._cache(cmd)
        else:
            ack = self._inspect(cmd)
        ack.id = cmd.id
        return self._done(ack, t0)

    def _done(self, ack: Ack, t0: float) -> Ack:
        ack.worker_id = self.worker_id if self.worker_id is not None else get_worker_id()
        ack.elapsed_us = int((time.perf_counter() - t0) * 1e6)
        return ack

    def _cache(self, cmd: Command) -> Ack:
        hashes = cmd.fields["block_hashes"]
        pins = self.state.pins
        pins.reap()
        if cmd.fields["pin"]:
            r = pins.pin(hashes, cmd.fields.get("ttl_seconds"))
        else:
            r = pins.unpin(hashes)
        if r.affected == 0:
            status = "noop"
        elif r.skipped or r.missing or r.noop:
            status = "partial"
        else:
            status = "applied"
        if r.affected == 0 and r.skipped:
            status = "rejected"
        return Ack(type="Cache", status=status, requested=len(hashes), affected=r.affected,
                   skipped=r.skipped + r.noop, missing=r.missing, reason=r.reason, tiers=r.tiers)

    def _inspect(self, cmd: Command) -> Ack:
        st = self.state
        root = st.ops.root()
        hashes = cmd.fields.get("block_hashes")
        if hashes is None:
            hashes = [h for h, _ in st.index.items()]
        blocks, missing, tiers = [], [], {}
        for h in hashes:
            node = st.index.get(h, root)
            if node is None:
                missing.append(h)
                continue
            node_tiers = st.ops.tiers(node)
            for t in node_tiers:
                tiers[t] = tiers.get(t, 0) + 1
            blocks.append({"block_hash": h, "tiers": node_tiers, "pin_count": st.pins.pin_count_of_hash(h),
                           "node_pin_count": getattr(node, "pin_count", 0)})
        detail = {"blocks": blocks, "pool_tokens": st.ops.pool_tokens(),
                  "pinned_tokens": st.pins.pinned_tokens(), "budget_tokens": st.pins.budget_tokens(),
                  "indexed_blocks": len(st.index), "metrics": dict(st.pins.metrics)}
        return Ack(type="Inspect", status="applied" if blocks else "noop", requested=len(hashes),
                   affected=len(blocks), missing=missing, tiers=tiers, detail=detail)

    def flush(self) -> Ack:
        """Pin-aware flush_cache: evict everything unpinned, keep pinned blocks (on host under
        HiCache) and their index entries (lessons.md #3)."""
        t0 = time.perf_counter()
        st = self.state
        st.pins.reap()
        evicted = st.ops.flush_unpinned()
        kept = sum(1 for pins in st.pins.records.values() if pins)
        return self._done(Ack(type="Flush", status="applied", affected=evicted, skipped=kept,
                              reason=f"kept {kept} pinned block(s)"), t0)


def _type_of(body: Any) -> str:
    try:
        if isinstance(body, dict):
            inner = body.get("command", body)
            return str(inner.get("type", "unknown"))
    except Exception:
        pass
    return "unknown"
