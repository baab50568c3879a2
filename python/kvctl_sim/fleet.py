"""The fleet: every simulated worker of one configuration in one process, advanced together on
the virtual clock by the engine (src/sim/engine.ts owns the clock; this side only runs workers up
to where the engine may next act).

``advance(until)`` runs, in time order (ties by worker), every worker turn that starts before
``until``; a turn that finishes a request or acks a command pulls the horizon in to that moment
(the engine must answer it before anything later happens: a finished turn lets the next request
of its program, or a queued one, go). It returns that moment with what happened up to it: first
tokens, finishes, acks, and every worker's KV-event batches (SGLang's own msgpack encoding) with
their times. Round trips therefore scale with requests and commands, not with steps.
"""
from __future__ import annotations

import heapq
import math
from array import array
from typing import Any, Dict, List, Optional

from .cache import WorkerSpec
from .request import SimRequest
from .worker import Outbox, Worker, tokens_of


class Fleet:
    def __init__(self, profile: Any, specs: List[WorkerSpec]):
        from .native_hash import preload_native_hash
        from .pools import install_mock_pools
        from .storage import install_inert_storage_threads, reset_stores
        from .virtual import CLOCK, install_kvctl_clock

        install_mock_pools()
        preload_native_hash()
        install_inert_storage_threads()
        install_kvctl_clock()
        reset_stores()
        CLOCK.now = 0.0
        self.profile = profile
        self.out = Outbox()
        self.workers = [Worker(s, profile, self.out) for s in specs]
        self.sequences: Dict[str, array] = {}
        self.now = 0.0
        self.advances = 0
        # Every worker's next wake, kept between advances: a worker's wake changes only when it
        # steps or takes an input (entries carry the worker's version; older ones are skipped).
        # A shared L3 lets one worker's writes move another's wake: then all are recomputed.
        self.wakes: List[tuple] = []
        self.version = [0] * len(self.workers)
        self.dirty = set(range(len(self.workers)))
        self.coupled = any(s.storage == "shared" for s in specs)
        self.index = {w.spec.id: i for i, w in enumerate(self.workers)}

    def worker(self, wid: str) -> Worker:
        i = self.index.get(wid)
        if i is None:
            raise ValueError(f"worker: unknown worker {wid!r}")
        self.dirty.add(i)  # it is handed an input: its wake may move
        return self.workers[i]

    def _rewake(self, i: int) -> None:
        self.version[i] += 1
        t = self.workers[i].next_wake()
        if t is not None:
            heapq.heappush(self.wakes, (t, i, self.version[i]))

    def submit(self, t: float, wid: str, rid: str, program: str, keep: int, prompt: bytes,
               output: bytes, session: Optional[str]) -> None:
        """A request at ``t`` on ``wid``: its prompt is the program's last sequence's first ``keep``
        tokens then ``prompt``; ``output`` is what the worker will generate."""
        base = self.sequences.get(program, array("q"))
        if keep > len(base):
            raise ValueError(f"keep: {keep} tokens asked of program {program!r}, which holds {len(base)}")
        seq = base[:keep]
        seq.extend(tokens_of(prompt))
        out = tokens_of(output)
        self.sequences[program] = seq + out
        req = SimRequest(rid, seq, out, t, session=session)
        self.worker(wid).push(t, "req", req)

    def command(self, t: float, wid: str, cid: int, body: bytes) -> None:
        self.worker(wid).push(t, "command", (cid, body))

    def close_session(self, t: float, wid: str, session: str) -> None:
        self.worker(wid).push(t, "close", session)

    def forget(self, program: str) -> None:
        """The program ended: its token sequence is no longer needed."""
        self.sequences.pop(program, None)

    def advance(self, until: float) -> float:
        """Worker turns in (time, worker) order, as a heap of every worker's next wake built
        afresh would give them."""
        from .virtual import CLOCK

        self.advances += 1
        for i in range(len(self.workers)) if self.coupled else sorted(self.dirty):
            self._rewake(i)
        self.dirty.clear()
        heap, version = self.wakes, self.version
        limit = until
        while heap:
            t, i, v = heap[0]
            if v != version[i]:
                heapq.heappop(heap)  # superseded
                continue
            if not t < limit:
                break
            heapq.heappop(heap)
            if self.workers[i].step(t, limit):
                limit = min(limit, CLOCK.now)
            self._rewake(i)
        self.now = limit if math.isfinite(limit) else self.now
        return limit

    def busy(self) -> bool:
        return any(w.busy() for w in self.workers)
