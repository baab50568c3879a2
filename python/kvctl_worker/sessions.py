"""Leases (Pause) and tool offloads (ToolStart/ToolEnd): named holds on host copies.

A hold is a PinManager record with an ``owner`` ("lease:<id>", "tool:<session>"), so it shares the
pins' single per-node host protection, their split/removal/reset handling and their budget. Both
kinds expire by themselves: ``reap`` runs on the scheduler loop tick (scheduler_side) and before
every command, with no caller needed.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional

from . import clock as clocks

TOOL_TTL_S = 900.0  # default of KvctlConfig.tool_ttl_s


@dataclasses.dataclass
class Hold:
    key: str                      # lease id or session id
    hashes: List[int]
    expires_at: Optional[float]   # monotonic clock; None = until revoked / ended
    expires_at_ms: Optional[int]  # wall clock, for the ack
    epoch: Optional[int] = None


class Sessions:
    def __init__(self, pins, clock: Callable[[], float] = clocks.monotonic,
                 wall_ms: Callable[[], int] = clocks.wall_ms, tool_ttl_s: float = TOOL_TTL_S):
        self.pins = pins
        self.tool_ttl_s = tool_ttl_s
        self.clock = clock
        self.wall_ms = wall_ms
        self.leases: Dict[str, Hold] = {}
        self.tools: Dict[str, Hold] = {}
        self.epochs: Dict[str, int] = {}
        self.metrics = {"leases_expired": 0, "tool_offloads_expired": 0}

    def _expiry(self, ttl: Optional[float]):
        if ttl is None:
            return None, None
        return self.clock() + ttl, self.wall_ms() + int(ttl * 1000)

    # ---- leases ---------------------------------------------------------------------------
    def lease(self, lease_id: str, hashes: List[int], ttl: Optional[float]) -> Hold:
        exp, exp_ms = self._expiry(ttl)
        h = self.leases.get(lease_id)
        if h is None:
            h = self.leases[lease_id] = Hold(lease_id, [], exp, exp_ms)
        h.expires_at, h.expires_at_ms = exp, exp_ms
        for x in hashes:
            if x not in h.hashes:
                h.hashes.append(x)
        return h

    def end_lease(self, lease_id: str) -> Optional[Hold]:
        h = self.leases.pop(lease_id, None)
        if h is not None:
            self.pins.release_owner("lease:" + lease_id)
        return h

    # ---- tool offloads ----------------------------------------------------------------------
    def start_tool(self, session_id: str, hashes: List[int], ttl: Optional[float] = None) -> Hold:
        self.end_tool(session_id)
        epoch = self.epochs.get(session_id, 0) + 1  # increases on every offload
        self.epochs[session_id] = epoch
        exp, exp_ms = self._expiry(self.tool_ttl_s if ttl is None else ttl)
        h = self.tools[session_id] = Hold(session_id, list(hashes), exp, exp_ms, epoch)
        return h

    def end_tool(self, session_id: str) -> Optional[Hold]:
        h = self.tools.pop(session_id, None)
        if h is not None:
            self.pins.release_owner("tool:" + session_id)
        return h

    # ---- time -------------------------------------------------------------------------------
    def reap(self, now: Optional[float] = None) -> int:
        now = self.clock() if now is None else now
        n = 0
        for lid in [k for k, h in self.leases.items() if h.expires_at is not None and h.expires_at <= now]:
            self.end_lease(lid)
            self.metrics["leases_expired"] += 1
            n += 1
        for sid in [k for k, h in self.tools.items() if h.expires_at is not None and h.expires_at <= now]:
            self.end_tool(sid)
            self.metrics["tool_offloads_expired"] += 1
            n += 1
        return n

    def clear(self) -> None:
        """Cache reset: holds do not survive it (the pins' records are cleared with the tree)."""
        self.leases.clear()
        self.tools.clear()

    def lease_of_hash(self, h: int) -> Optional[str]:
        owners = [o[6:] for o in self.pins.owners_of_hash(h) if o.startswith("lease:")]
        return owners[0] if owners else None

    def sessions_of_hash(self, h: int) -> List[str]:
        return [o[5:] for o in self.pins.owners_of_hash(h) if o.startswith("tool:")]
