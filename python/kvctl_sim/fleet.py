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
        self.by_id: Dict[str, Worker] = {w.spec.id: w for w in self.workers}
        self.sequences: Dict[str, array] = {}
        self.now = 0.0
        self.advances = 0

    def worker(self, wid: str) -> Worker:
        w = self.by_id.get(wid)
        if w is None:
            raise ValueError(f"worker: unknown worker {wid!r}")
        return w

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
        self.advances += 1
        heap = []
        for i, w in enumerate(self.workers):
            t = w.next_wake()
            if t is not None:
                heap.append((t, i))
        heapq.heapify(heap)
        limit = until
        while heap and heap[0][0] < limit:
            t, i = heapq.heappop(heap)
            w = self.workers[i]
            if w.step(t, limit):
                from .virtual import CLOCK

                limit = min(limit, CLOCK.now)
            nxt = w.next_wake()
            if nxt is not None:
                heapq.heappush(heap, (nxt, i))
        self.now = limit if math.isfinite(limit) else self.now
        return limit

    def busy(self) -> bool:
        return any(w.busy() for w in self.workers)
