"""Inspect: read-only report of tier residency, pins, leases, tool offloads, budget and pools."""
from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Dict, List, Optional

from ..ack import Ack
from ..codec import Command
from .context import CommandContext, lease_dict

# This process, as Inspect names it: a router that sees it change knows the worker restarted (its
# pins, leases and tool offloads are gone) even if it missed every sign of it in the event stream.
INCARNATION = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


class InspectCommands:
    types = ("Inspect",)

    def __init__(self, ctx: CommandContext, counters: Callable[[Any], dict]):
        self.ctx = ctx
        self.counters = counters  # the dispatcher's, the pins' and the sessions' counters

    @staticmethod
    def _with(hashes: Optional[List[int]], more: List[int]) -> List[int]:
        base = hashes or []
        return base + [h for h in more if h not in base]

    def run(self, cmd: Command) -> Ack:
        st = self.ctx.state
        f = cmd.fields
        hashes = f.get("block_hashes")
        lease = epoch = None
        if f.get("lease_id") is not None:
            hold = st.sessions.leases.get(f["lease_id"])
            if hold is not None:
                lease = lease_dict(hold)
                hashes = self._with(hashes, hold.hashes)
        if f.get("session_id") is not None:
            hold = st.sessions.tools.get(f["session_id"])
            if hold is not None:
                epoch = hold.epoch
                hashes = self._with(hashes, hold.hashes)
        if hashes is None:
            hashes = [] if (f.get("lease_id") or f.get("session_id")) else [h for h, _ in st.index.items()]
        blocks, missing, tiers = self._blocks(st, hashes)
        detail = {"incarnation": INCARNATION, "tree_core": st.moves.core, "commands": sorted(st.config.commands),
                  "blocks": blocks, "pool": self.pool(st), "pool_tokens": st.ops.pool_tokens(),
                  "pinned_tokens": st.pins.pinned_tokens(), "budget_tokens": st.pins.budget_tokens(),
                  "indexed_blocks": len(st.index), "metrics": dict(st.pins.metrics)}
        return Ack(type="Inspect", status="applied", requested=len(hashes), affected=0,
                   missing=missing, tiers=tiers, lease=lease, epoch=epoch, detail=detail)

    @staticmethod
    def _blocks(st, hashes):
        found = dict(st.index.lookup(hashes, st.ops.root())[0])
        blocks, missing, tiers = [], [], {}
        for h in hashes:
            node = found.get(h)
            if node is None:
                missing.append(h)
                continue
            node_tiers = st.ops.tiers(node)
            for t in node_tiers:
                tiers[t] = tiers.get(t, 0) + 1
            blocks.append({"block_hash": h, "tiers": node_tiers, "pin_count": st.pins.pin_count_of_hash(h),
                           "node_pin_count": getattr(node, "pin_count", 0),
                           "transient": bool(getattr(node, "kvctl_transient", False)),
                           "lease": st.sessions.lease_of_hash(h),
                           "tool_sessions": st.sessions.sessions_of_hash(h)})
        return blocks, missing, tiers

    def pool(self, st) -> dict:
        cache = self.ctx.cache
        out: Dict[str, Any] = {"pinned_tokens": st.pins.pinned_tokens(),
                               "budget_tokens": st.pins.budget_tokens(),
                               "leases": len(st.sessions.leases), "tool_offloads": len(st.sessions.tools),
                               **self.counters(st)}
        alloc = getattr(cache, "token_to_kv_pool_allocator", None)
        if alloc is not None:
            out["device"] = {"size": int(alloc.size), "available": int(alloc.available_size())}
        ctrl = getattr(cache, "cache_controller", None)
        if ctrl is not None:
            hp = ctrl.mem_pool_host
            out["host"] = {"size": int(hp.size), "available": int(hp.available_size())}
            out["in_flight"] = in_flight(cache)
        return out


def in_flight(cache) -> Dict[str, int]:
    """SGLang's own transfers under way: each holds its nodes (a purge skips them), so a caller
    that needs a node gone waits for its count to drain."""
    return {name: len(getattr(cache, "ongoing_" + name, None) or ())
            for name in ("write_through", "load_back", "backup", "prefetch")}
