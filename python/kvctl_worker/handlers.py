"""Commands -> tree operations -> Acks. Runs on the scheduler thread.

``CommandHandler.handle`` is the one command layer both front doors (HTTP, NATS) reach through
``scheduler_side.handle_command``: decode (strict, naming the field), dedupe by envelope id,
route to the command family (``commands/``), count every outcome per status and per rejection
field.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, Dict, Optional

from . import clock as clocks
from .ack import Ack
from .codec import Command, CommandError, decode, peek_id_type
from .commands.context import CommandContext
from .commands.inspection import InspectCommands
from .commands.leases import LeaseCommands
from .commands.pins import PinCommands
from .commands.prefetch import PrefetchCommands
from .commands.prune_think import PruneThinkCommands
from .commands.tools import ToolCommands
from .commands.warm import WarmCommands
from .hooks import state_for_cache
from .identity import get_worker_id

logger = logging.getLogger(__name__)


class Dedupe:
    """Envelope ids seen within the window (time and count bounded, oldest dropped first)."""

    def __init__(self, window_s: float = 600.0, max_ids: int = 100_000,
                 clock=clocks.monotonic):
        self.window_s, self.max_ids, self.clock = window_s, max_ids, clock
        self.seen: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()

    def _trim(self, now: float) -> None:
        while self.seen and (len(self.seen) > self.max_ids
                             or next(iter(self.seen.values()))[0] <= now - self.window_s):
            self.seen.popitem(last=False)

    def get(self, cid: str) -> Optional[dict]:
        self._trim(self.clock())
        hit = self.seen.get(cid)
        return None if hit is None else hit[1]

    def put(self, cid: str, ack: dict) -> None:
        self.seen[cid] = (self.clock(), ack)
        self._trim(self.clock())


def duplicate_ack(cid: str, first: dict) -> Ack:
    reason = f"duplicate of {cid}; first outcome: {first['status']}"
    if first.get("reason"):
        reason += f" ({first['reason']})"
    return Ack(type=first["type"], status="duplicate", id=cid, requested=first["requested"],
               affected=first["affected"], skipped=first["skipped"], missing=list(first["missing"]),
               reason=reason, tiers=dict(first["tiers"]), lease=first["lease"], epoch=first["epoch"])


class CommandHandler:
    """Decode (strict, naming the field), dedupe by envelope id, route to the family that owns the
    command's type, and count every outcome per status, type and rejection field."""

    def __init__(self, cache: Any, worker_id: Optional[str] = None):
        self.cache = cache
        cfg = state_for_cache(cache).config
        self.worker_id = worker_id or cfg.worker_id
        self.dedupe = Dedupe(cfg.dedupe_window_s, cfg.dedupe_max_ids)
        self.metrics: Dict[str, Any] = {"rejected": 0, "by_status": {}, "rejected_by_field": {},
                                        "by_type": {}}
        ctx = CommandContext(cache)
        self.pins = PinCommands(ctx)
        self.prune_think = PruneThinkCommands(ctx)
        self.inspect = InspectCommands(ctx, self.counters)
        families = (self.pins, self.prune_think, LeaseCommands(ctx), ToolCommands(ctx),
                    WarmCommands(ctx), PrefetchCommands(ctx), self.inspect)
        self.routes = {t: f.run for f in families for t in f.types}

    @property
    def state(self):
        return state_for_cache(self.cache)

    def handle(self, body: Any) -> Ack:
        t0 = time.perf_counter()
        try:
            cmd = body if isinstance(body, Command) else decode(body)
        except CommandError as e:
            cid, ctype = peek_id_type(body)
            ack = Ack(type=ctype, status="rejected", id=cid, reason=str(e))
            return self._count(self._done(ack, t0), e.field)
        except Exception as e:  # the decoder must never take the worker down
            return self._count(self._done(Ack(type=None, status="rejected",
                                              reason=f"body: undecodable ({e})"), t0), "body")
        if cmd.id is not None:
            first = self.dedupe.get(cmd.id)
            if first is not None:
                return self._count(self._done(duplicate_ack(cmd.id, first), t0))
        ack, field = self._run(cmd)
        ack.id = cmd.id
        self._done(ack, t0)
        if cmd.id is not None:
            self._remember(cmd.id, ack)
        return self._count(ack, field)

    def _run(self, cmd: Command):
        """The family's ack, or a rejection naming its field, or an error: never raises."""
        try:
            st = self.state
            if cmd.type not in st.config.commands:
                raise CommandError("command.type", f"{cmd.type} is not accepted by this worker "
                                   "(--kv-control-config commands: "
                                   f"{', '.join(sorted(st.config.commands)) or 'none'})")
            st.sync()
            st.pins.reap()
            st.sessions.reap()
            st.prefetch.reap(self.cache)
            return self.routes[cmd.type](cmd), None
        except CommandError as e:  # semantic refusals (unknown lease, stale epoch, bad keys)
            return Ack(type=cmd.type, status="rejected", reason=str(e)), e.field
        except Exception as e:  # failed midway: say so, never raise into the scheduler
            logger.exception("kvctl: %s failed", cmd.type)
            return Ack(type=cmd.type, status="error", reason=f"failed midway: {type(e).__name__}: {e}"), None

    def _remember(self, cid: str, ack: Ack) -> None:
        d = ack.to_dict()
        d.pop("detail", None)  # a duplicate repeats counts, not Inspect's payload: keep it small
        self.dedupe.put(cid, d)

    def _count(self, ack: Ack, field: Optional[str] = None) -> Ack:
        m = self.metrics
        m["by_status"][ack.status] = m["by_status"].get(ack.status, 0) + 1
        m["by_type"][ack.type] = m["by_type"].get(ack.type, 0) + 1
        if ack.status == "rejected":
            m["rejected"] += 1
            key = field or "other"
            m["rejected_by_field"][key] = m["rejected_by_field"].get(key, 0) + 1
        return ack

    def _done(self, ack: Ack, t0: float) -> Ack:
        ack.worker_id = self.worker_id if self.worker_id is not None else get_worker_id()
        ack.elapsed_us = int((time.perf_counter() - t0) * 1e6)
        return ack

    def retry_transient_host_releases(self) -> int:
        """Scheduler tick: see ``PruneThinkCommands.retry_transient_host_releases``."""
        return self.prune_think.retry_transient_host_releases()

    def counters(self, st) -> dict:
        """Copies of the command layer's, the pins' and the sessions' counters."""
        return {"commands": {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.metrics.items()},
                "pins": dict(st.pins.metrics), "sessions": dict(st.sessions.metrics),
                "prefetch": {**st.prefetch.metrics, "holds": len(st.prefetch.holds)}}

    def flush(self) -> Ack:
        """Pin-aware flush_cache (``PinCommands.flush``), stamped like every ack."""
        t0 = time.perf_counter()
        return self._done(self.pins.flush(), t0)
