"""The virtual clock every simulated worker runs on, and the device events that complete on it.

One clock per fleet process. The fleet sets ``CLOCK.now`` to a worker's time before it runs that
worker's scheduler step; SGLang's cache code and kvctl's command layer read it through the events
below and ``kvctl.clock`` (pin TTLs, leases, prefetch deadlines, the dedupe window), never through
``time.monotonic()``.

A transfer HiCache submits completes at a time on this clock (the link's own queue: see
pools.py). ``query()`` says whether that time has come, as CUDA's ``Event.query`` does. A
``synchronize()`` is the scheduler thread blocking on the copy: it moves the clock to the copy's
end, and the worker's step pays for that wait (``Clock.stalled``).
"""
from __future__ import annotations


class Clock:
    __slots__ = ("now", "epoch_ms")

    def __init__(self) -> None:
        self.now = 0.0
        # Wall-clock milliseconds at virtual time 0 (what acks' expiry times count from): fixed, so
        # the same seed gives the same bytes.
        self.epoch_ms = 1_700_000_000_000

    def wall_ms(self) -> int:
        return self.epoch_ms + int(self.now * 1000)

    def monotonic(self) -> float:
        return self.now


CLOCK = Clock()


class SimEvent:
    """A device event recorded on a stream: complete at ``done_at`` on the virtual clock (already
    complete when nothing set a time, as a copy that moved no bytes)."""

    __slots__ = ("done_at",)

    def __init__(self, *_args, **_kwargs) -> None:
        self.done_at = 0.0

    def record(self, *_args, **_kwargs) -> None:
        pass

    def wait(self, *_args, **_kwargs) -> None:
        pass

    def query(self) -> bool:
        return CLOCK.now >= self.done_at

    def synchronize(self) -> None:
        if CLOCK.now < self.done_at:
            CLOCK.now = self.done_at

    def elapsed_time(self, other: "SimEvent") -> float:
        return max(0.0, (other.done_at - self.done_at) * 1000.0)


def install_kvctl_clock() -> None:
    """kvctl's command layer reads this clock (TTLs, leases, deadlines, acks' expiry times)."""
    from sglang.srt.kvctl import clock as kvctl_clock

    kvctl_clock.use(CLOCK.monotonic, CLOCK.wall_ms)
