"""The clocks the command layer reads, from one place: pin TTLs, leases, tool offloads, prefetch
holds and deadlines, and the dedupe window read ``monotonic()``; acks' expiry times read
``wall_ms()``. A server runs on the process clocks. ``kvctl sim`` runs the same code on its
virtual clock (``use``), so every expiry happens at the simulated moment, never at a wall-clock
one."""
from __future__ import annotations

import time
from typing import Callable, Optional


def _process_wall_ms() -> int:
    return int(time.time() * 1000)


_monotonic: Callable[[], float] = time.monotonic
_wall_ms: Callable[[], int] = _process_wall_ms


def monotonic() -> float:
    return _monotonic()


def wall_ms() -> int:
    return _wall_ms()


def use(monotonic_s: Optional[Callable[[], float]], wall: Optional[Callable[[], int]] = None) -> None:
    """Sets the clocks (None: the process clock)."""
    global _monotonic, _wall_ms
    _monotonic = monotonic_s or time.monotonic
    _wall_ms = wall or _process_wall_ms
