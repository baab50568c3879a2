"""PinManager: reference-counted external pins by block hash, TTL leases, budget, safety net.

One pin record per pin (so a double pin needs a double unpin). A node's ``pin_count`` is the
number of records on its pages; while it is > 0 the node holds exactly one protection taken
through the tree ops (host lock under HiCache, device lock otherwise), separate from the
requests' ``lock_ref``. Records are keyed by hash, never by node, so a split needs only a recount
of both halves.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from typing import Any, Callable, Dict, List, Optional

from . import clock as clocks

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Pin:
    hash: int
    seq: int
    expires_at: Optional[float] = None
    owner: Optional[str] = None  # None: a Cache pin; "lease:<id>" / "tool:<session>": a hold


@dataclasses.dataclass
class PinResult:
    affected: int = 0
    skipped: int = 0
    noop: int = 0
    missing: List[int] = dataclasses.field(default_factory=list)
    tiers: Dict[str, int] = dataclasses.field(default_factory=dict)
    reason: Optional[str] = None


class PinManager:
    def __init__(self, index, ops, budget_fraction: float = 0.5,
                 clock: Callable[[], float] = clocks.monotonic):
        self.index = index
        self.ops = ops
        self.budget_fraction = budget_fraction
        self.clock = clock
        self.records: Dict[int, List[Pin]] = {}  # never an empty list: a hash with no pin is absent
        # the hashes each owner holds (one record per hash and owner), so releasing a hold touches
        # its own hashes only; and the order hashes entered ``records``, so it releases them in the
        # order a scan of ``records`` would
        self._owned: Dict[str, Dict[int, None]] = {}
        self._born: Dict[int, int] = {}
        self._births = itertools.count()
        # the nodes holding a protection (id -> node): what protected_tokens() sums under HiCache
        self.protected: Dict[int, Any] = {}
        # no TTL record expires before this (a lower bound: reap() skips its scan until then)
        self._next_expiry = math.inf
        self._seq = itertools.count()
        self.metrics = {"pins_expired": 0, "safety_net_released": 0, "safety_net_triggers": 0,
                        "pins_refused_budget": 0}

    # ---- accounting -------------------------------------------------------------------------
    def pinned_tokens(self) -> int:
        return self.index.page_size * len(self.records)

    def budget_tokens(self) -> int:
        return int(self.budget_fraction * self.ops.pool_tokens())

    def pin_count_of_hash(self, h: int) -> int:
        """Cache pins only (Inspect's pin_count); leases and tool offloads are reported apart."""
        return sum(1 for p in self.records.get(h, ()) if p.owner is None)

    def owners_of_hash(self, h: int) -> List[str]:
        return sorted({p.owner for p in self.records.get(h, ()) if p.owner is not None})

    def hold(self, found: List[tuple], owner: str) -> PinResult:
        """Protect (h, node) pairs for ``owner`` (a lease or a tool offload): one record per hash
        and owner, bounded by the same budget as pins."""
        res = PinResult()
        budget = self.budget_tokens()
        used = self.pinned_tokens()
        touched = {}
        for h, node in found:
            if h in self._owned.get(owner, ()):
                touched[id(node)] = node
                res.noop += 1
                continue
            added = self._add_record(h, used, budget, res, owner=owner)
            if added is None:
                continue
            used = added
            touched[id(node)] = node
        known: Dict[int, Any] = {}
        for node in touched.values():
            self.recount(node, known)
        return res

    def _add_record(self, h: int, used: int, budget: int, res: PinResult,
                    expires: Optional[float] = None, owner: Optional[str] = None) -> Optional[int]:
        """One more record on ``h``; a hash not pinned yet takes a page of the budget. Returns the
        tokens now used, or None when the budget refuses it (counted in ``res``)."""
        if not self.records.get(h):
            if used + self.index.page_size > budget:
                res.skipped += 1
                self.metrics["pins_refused_budget"] += 1
                res.reason = f"pin budget exhausted ({used}/{budget} host tokens)"
                return None
            used += self.index.page_size
        pins = self.records.get(h)
        if pins is None:
            pins = self.records[h] = []
            self._born[h] = next(self._births)
        pins.append(Pin(h, next(self._seq), expires, owner))
        if owner is not None:
            self._owned.setdefault(owner, {})[h] = None
        res.affected += 1
        return used

    def _pop_hash(self, h: int) -> Optional[List[Pin]]:
        """Every record on ``h`` goes (their owners no longer hold it); returns them."""
        pins = self.records.pop(h, None)
        if pins is not None:
            del self._born[h]
            for p in pins:
                if p.owner is not None:
                    self._disown(p.owner, h)
        return pins

    def _disown(self, owner: str, h: int) -> None:
        owned = self._owned.get(owner)
        if owned is not None:
            owned.pop(h, None)
            if not owned:
                del self._owned[owner]

    def release_owner(self, owner: str) -> List[int]:
        """Drop every record of ``owner``; returns the hashes it held."""
        hashes = sorted(self._owned.pop(owner, ()), key=self._born.__getitem__)
        for h in hashes:
            keep = [p for p in self.records[h] if p.owner != owner]
            if keep:
                self.records[h] = keep
            else:
                del self.records[h]
                del self._born[h]
        seen, known = {}, {}
        for h in hashes:
            node = self.index.get(h, self.ops.root(), known)
            if node is not None:
                seen[id(node)] = node
        for node in seen.values():
            self.recount(node, known)
        return hashes

    def release_hashes(self, hashes: List[int]) -> None:
        """Drop every record (any owner) on these hashes (Prune/Think with force)."""
        seen, known = {}, {}
        for h in hashes:
            if self._pop_hash(h):
                node = self.index.get(h, self.ops.root(), known)
                if node is not None:
                    seen[id(node)] = node
        for node in seen.values():
            self.recount(node, known)

    def recount(self, node: Any, known: Optional[Dict[int, Any]] = None) -> None:
        """Re-derive ``node``'s protection from its records. ``known``: the reachability memo of
        the calling operation (index.reachable); it is emptied when a protection is taken, since
        making host room for the backup may remove nodes (releasing one removes none)."""
        if node.parent is not None and not self.index.reachable(node, self.ops.root(), known):
            return  # left the tree meanwhile (e.g. host room made for a backup): nothing to hold
        records = self.records.get
        count = 0
        for h in getattr(node, "kvctl_hashes", ()) or ():
            pins = records(h)
            if pins:
                count += len(pins)
        node.pin_count = count
        held = getattr(node, "kvctl_receipt", None) is not None
        if count > 0 and not held:
            receipt = self.ops.protect(node)
            if known is not None:
                known.clear()
            if receipt is None and getattr(self.ops, "tier_aware", False):
                return  # the node left the tree while its path was being backed up
            node.kvctl_receipt = receipt or True
            self.protected[id(node)] = node
        elif count == 0 and held:
            receipt = node.kvctl_receipt
            node.kvctl_receipt = None
            self.protected.pop(id(node), None)
            self.ops.release(node, receipt)

    # ---- commands ---------------------------------------------------------------------------
    def pin(self, hashes: List[int], ttl_seconds: Optional[float] = None) -> PinResult:
        res = PinResult()
        found, res.missing = self.index.lookup(hashes, self.ops.root())
        budget = self.budget_tokens()
        used = self.pinned_tokens()
        expires = None if ttl_seconds is None else self.clock() + ttl_seconds
        touched = {}
        for h, node in found:
            added = self._add_record(h, used, budget, res, expires=expires)
            if added is None:
                continue
            used = added
            touched[id(node)] = node
        if expires is not None:
            self._next_expiry = min(self._next_expiry, expires)
        self._recount_and_tally(touched, res)
        return res

    def unpin(self, hashes: List[int]) -> PinResult:
        res = PinResult()
        found, res.missing = self.index.lookup(hashes, self.ops.root())
        touched = {}
        for h, node in found:
            pins = self.records.get(h)
            mine = [i for i, p in enumerate(pins or ()) if p.owner is None]
            if not mine:
                res.noop += 1
                continue
            pins.pop(mine[-1])  # newest first; counts are what matter
            if not pins:
                del self.records[h]
                del self._born[h]
            touched[id(node)] = node
            res.affected += 1
        self._recount_and_tally(touched, res)
        return res

    def _recount_and_tally(self, touched: dict, res: PinResult) -> None:
        """Re-derive the protection of every node a pin/unpin touched; count them by tier."""
        for node in touched.values():
            self.recount(node)
            for tier in self.ops.tiers(node):
                res.tiers[tier] = res.tiers.get(tier, 0) + 1

    def _drop(self, pin: Pin) -> None:
        pins = self.records.get(pin.hash)
        if not pins:
            return
        pins.remove(pin)
        if pin.owner is not None:
            self._disown(pin.owner, pin.hash)
        if not pins:
            del self.records[pin.hash]
            del self._born[pin.hash]
        node = self.index.get(pin.hash, self.ops.root())
        if node is not None:
            self.recount(node)

    # ---- time and pressure ------------------------------------------------------------------
    def reap(self, now: Optional[float] = None) -> int:
        """Expire TTL pins (run from the scheduler loop); returns how many expired."""
        now = self.clock() if now is None else now
        if now < self._next_expiry:
            return 0
        expired = [p for pins in self.records.values() for p in pins
                   if p.expires_at is not None and p.expires_at <= now]
        for p in expired:
            self._drop(p)
        self._next_expiry = min((p.expires_at for pins in self.records.values() for p in pins
                                 if p.expires_at is not None), default=math.inf)
        self.metrics["pins_expired"] += len(expired)
        return len(expired)

    def relieve(self, required_tokens: int) -> int:
        """Safety net: release the oldest pins, as few as needed, until the GPU tokens the pins
        hold leave room for ``required_tokens``. Only GPU memory can wedge the scheduler: a
        host-tier pin whose GPU copy can be demoted holds none, so it is never released here
        (the pin budget bounds the host share). Returns pins released."""
        total = self.ops.device_pool_tokens()

        def fits() -> bool:
            return self.ops.device_held_tokens(self.protected.values()) <= total - required_tokens

        if fits():
            return 0
        released = 0
        for pin in sorted((p for ps in self.records.values() for p in ps), key=lambda p: p.seq):
            if fits():
                break
            self._drop(pin)
            released += 1
        if released:
            self.metrics["safety_net_triggers"] += 1
            self.metrics["safety_net_released"] += released
            logger.warning(
                "kvctl safety net: released %d oldest pin(s) so a request of %d tokens can be "
                "scheduled (pins hold %d of %d GPU tokens)", released, required_tokens,
                self.ops.device_held_tokens(self.protected.values()), total)
        return released

    def forget(self, node: Any) -> None:
        """The node left the tree: its pins go with it (only reset can do that to a pin)."""
        for h in getattr(node, "kvctl_hashes", ()) or ():
            self._pop_hash(h)
        node.pin_count = 0
        node.kvctl_receipt = None
        self.protected.pop(id(node), None)

    def clear(self) -> None:
        self.records.clear()
        self._owned.clear()
        self._born.clear()
        self.protected.clear()
        self._next_expiry = math.inf
