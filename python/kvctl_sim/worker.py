"""One simulated worker: SGLang's cache (cache.py) under a continuous-batching scheduler whose
forward is a step time from the profile, on the virtual clock.

The scheduler is SGLang 0.5.23's default shape (``--schedule-policy fcfs``, no mixed chunks): each
iteration first takes what arrived (requests, kvctl commands, session closes), ticks kvctl's loop
and HiCache's events, then runs a prefill batch if any request can be admitted (the chunked
request first, then the waiting queue in arrival order, within ``min(max_prefill_tokens,
chunked_prefill_size)`` tokens and ``max_running_requests``, while the pool has room, evictions
counted: PrefillAdder's budgets), else one decode step for every running request. A prefill batch
lasts ``profile.prefill_s`` over its requests; the KV it loads from host (load-back) overlaps it
layer by layer (``timing.layerwise_s``). Decode steps between two events
run as one stretch (the batch does not change in between): each step lasts
``profile.decode_s(batch size, KV tokens)`` and the stretch ends at a finish, at the fleet's
horizon (new input may arrive there), or when a host copy completes while requests wait.

Where it differs from SGLang's own scheduler, and why (docs/sim.md, "The worker model"): a request's
output slots are allocated with its prompt (no retraction); decode stretches are taken whole
between events.
"""
from __future__ import annotations

import collections
import math
import types
from array import array
from typing import Any, Deque, List, Optional, Tuple

from .cache import WorkerSpec, build_cache
from .request import RequestCache, SimRequest, page_floor
from .timing import layerwise_s
from .virtual import CLOCK


class Batch:
    __slots__ = ("kind", "end", "reqs", "chunks", "steps")

    def __init__(self, kind: str, end: float, reqs: List[SimRequest], chunks=None, steps: int = 0):
        self.kind, self.end, self.reqs, self.chunks, self.steps = kind, end, reqs, chunks, steps


class Outbox:
    """What the fleet's workers did, in the order they did it, for the engine (fleet.py)."""

    def __init__(self) -> None:
        self.events: List[tuple] = []
        self.frames: List[Tuple[str, float, bytes]] = []

    def clear(self) -> None:
        self.events = []
        self.frames = []


class Worker:
    def __init__(self, spec: WorkerSpec, profile: Any, out: Outbox):
        import msgspec

        self.spec = spec
        self.profile = profile
        self.out = out
        built = build_cache(spec, profile)
        self.cache = built.cache
        self.links = built.links
        self.rc = RequestCache(built.cache, built.allocator, spec.page_size, spec.session_radix)
        self.hicache = spec.host_tokens > 0
        self.storage = built.storage
        self.inbox: Deque[tuple] = collections.deque()
        self.waiting: List[SimRequest] = []
        self.running: List[SimRequest] = []
        self.chunked: Optional[SimRequest] = None
        self.batch: Optional[Batch] = None
        self.free_at = 0.0
        self.blocked = False
        self.budget = profile.max_prefill_tokens
        if spec.chunked_prefill_size > 0:
            self.budget = min(self.budget, spec.chunked_prefill_size)
        self.budget = page_floor(self.budget, spec.page_size)
        self.prefill_s = 0.0
        self.prefill_batches = 0
        self.decode_steps = 0
        # What kvctl's scheduler hooks read of the scheduler (scheduler_side.on_scheduler_tick).
        self.stub = types.SimpleNamespace(tree_cache=self.cache, waiting_queue=self.waiting)
        self._encoder = msgspec.msgpack.Encoder()

    # ---- input ----------------------------------------------------------------------------

    def push(self, t: float, kind: str, payload: Any) -> None:
        """An arrival at ``t`` (inputs come in time order): "req", "command", "close"."""
        self.inbox.append((t, kind, payload))

    def next_wake(self) -> Optional[float]:
        if self.batch is not None:
            return self.batch.end
        t = self.free_at
        head = max(t, self.inbox[0][0]) if self.inbox else None
        if (self.waiting or self.running or self.chunked) and not self.blocked:
            return t
        options = [head, self._storage_wake(t)]
        if self.blocked:
            d2h = self.links.free_at["d2h"]
            options.append(d2h if d2h > t else None)
            options.append(self._kvctl_deadline())
        options = [x for x in options if x is not None]
        return min(options) if options else None

    def _storage_wake(self, t: float) -> Optional[float]:
        """With an L3, when a copy completes or a prefetch's deadline passes: a waiting request may
        wait for it, and a host write-through's ack is what issues its storage backup (an idle
        scheduler still polls its events: what it writes, other workers of a shared store read)."""
        if self.storage is None:
            return None
        times = [self.storage.next_at(t), self.links.free_at["d2h"]]
        later = [x for x in times if x is not None and x > t]
        return min(later) if later else None

    def _kvctl_deadline(self) -> Optional[float]:
        """When kvctl's state next changes by itself (a pin's TTL, a lease or tool offload, a
        prefetch hold), for a worker blocked on memory: SGLang's idle scheduler loop keeps ticking,
        so what expires frees its memory at that moment."""
        if not self.spec.kvctl:
            return None
        from sglang.srt.kvctl.hooks import state_for_cache

        st = state_for_cache(self.cache)
        times = [st.pins._next_expiry]
        for h in (*st.sessions.leases.values(), *st.sessions.tools.values()):
            if h.expires_at is not None:
                times.append(h.expires_at)
        times.extend(h.expires_at for h in st.prefetch.holds.values())
        t = min(times)
        return t if math.isfinite(t) and t > self.free_at else None

    # ---- one scheduler turn ---------------------------------------------------------------

    def step(self, t: float, limit: float) -> bool:
        """Runs the worker at ``t``: ends the batch in flight when it is due, else takes inputs and
        starts the next batch. True when it produced what the engine must answer at CLOCK.now
        (a finished request or a command's ack): the fleet then stops there."""
        CLOCK.now = max(t, self.free_at)
        if self.batch is not None:
            reacts = self._end_batch()
            self.free_at = CLOCK.now
            self._flush()
            if reacts:
                return True
        if self._take_inputs():
            self.free_at = CLOCK.now
            self._flush()
            return True
        self._tick()
        self._start_batch(limit)
        if self.batch is None and self.storage is not None:
            self.free_at = CLOCK.now  # it polled its L3 at this moment: its next wake is later
        self._flush()
        return False

    def _take_inputs(self) -> bool:
        acked = False
        while self.inbox and self.inbox[0][0] <= CLOCK.now:
            _, kind, payload = self.inbox.popleft()
            self.blocked = False
            if kind == "req":
                self.rc.on_arrival(payload)
                if self.storage is not None:
                    self.storage.on_arrival(payload, self.rc.match(payload))
                self.waiting.append(payload)
            elif kind == "command":
                self._command(*payload)
                acked = True
            elif kind == "close":
                self.cache.release_radix_session(payload)
        return acked

    def _command(self, cid: int, body: bytes) -> None:
        from sglang.srt.kvctl import scheduler_side
        from sglang.srt.kvctl.ack import contract_ack, encode_ack

        h = scheduler_side.handler_of(self.stub)
        ack = h.handle(body)
        # A command that waited on a copy (a load-back's synchronize) held the scheduler that long.
        self.out.events.append(("ack", cid, CLOCK.now, encode_ack(contract_ack(ack.to_dict(), h.worker_id))))

    def _tick(self) -> None:
        if self.spec.kvctl:
            from sglang.srt.kvctl import scheduler_side

            scheduler_side.on_scheduler_tick(self.stub)
        if self.hicache:
            # Submits queued backups, then takes the copies that completed by now (write-through
            # and load-back acks): the scheduler's _process_hicache_events. The L3's threads run
            # before (what completed by now) and after (what the scheduler just handed them).
            if self.storage is not None:
                self.storage.step()
            self.cache.check_hicache_events()
            if self.storage is not None:
                self.storage.step()

    def _flush(self) -> None:
        events = self.cache.take_events()
        if events:
            from sglang.srt.disaggregation.kv_events import KVEventBatch

            payload = self._encoder.encode(KVEventBatch(ts=CLOCK.now, events=events))
            self.out.frames.append((self.spec.id, CLOCK.now, payload))

    # ---- batches --------------------------------------------------------------------------

    def _start_batch(self, limit: float) -> None:
        self.blocked = False
        reqs, chunks = self._form_prefill()
        if reqs:
            dur = self._prefill_time(reqs, chunks)
            self.prefill_s += dur
            self.prefill_batches += 1
            self.batch = Batch("prefill", CLOCK.now + dur, reqs, chunks)
        elif self.running:
            steps, end = self._decode_stretch(limit)
            self.decode_steps += steps
            self.batch = Batch("decode", end, self.running, steps=steps)
        else:
            # Nothing can run: wait from now for an input or a host copy to free room. The idle
            # worker's time is now, so a copy that completed before this turn never wakes it again
            # at its own (past) time; a chunked request waits as a queued one does.
            self.blocked = bool(self.waiting or self.chunked)
            self.free_at = CLOCK.now

    def _form_prefill(self) -> Tuple[List[SimRequest], List[int]]:
        budget, reqs, chunks = self.budget, [], []
        c = self.chunked
        if c is not None:
            n = min(budget, c.need)
            if self.rc.next_chunk(c, n):
                reqs.append(c)
                chunks.append(n)
                budget -= n
                self.chunked = None
            else:
                return reqs, chunks
        i = 0
        while i < len(self.waiting) and budget >= self.spec.page_size:
            if len(self.running) + len(reqs) >= self.profile.max_running_requests:
                break
            req = self.waiting[i]
            if self.storage is not None and not self.storage.ready(req):
                i += 1  # its L3 prefetch is under way: the scheduler passes over it
                continue
            if not self.rc.admit(req, budget):
                break
            self.waiting.pop(i)
            n = min(budget, req.need)
            req.admitted_at = CLOCK.now
            reqs.append(req)
            chunks.append(n)
            budget -= n
        if reqs and self.hicache:
            self.cache.ready_to_load_host_cache()
        return reqs, chunks

    def _prefill_time(self, reqs: List[SimRequest], chunks: List[int]) -> float:
        compute = self.profile.prefill_s(chunks, [r.done for r in reqs])
        load = max(0.0, self.links.free_at["h2d"] - CLOCK.now) if self.hicache else 0.0
        # Loads overlap the forward layer by layer: each layer waits for its own copy.
        return layerwise_s(compute, load, self.profile.layers)

    def _decode_stretch(self, limit: float) -> Tuple[int, float]:
        bs = len(self.running)
        kv = sum(r.kv_tokens for r in self.running)
        most = min(len(r.output) - r.generated for r in self.running)
        stop = limit
        if self.waiting and self.links.free_at["d2h"] > CLOCK.now:
            stop = min(stop, self.links.free_at["d2h"])
        wake = self._storage_wake(CLOCK.now) if self.waiting else None
        if wake is not None and wake > CLOCK.now:
            stop = min(stop, wake)
        return self.profile.decode_stretch(bs, kv, most, CLOCK.now, stop)

    def _end_batch(self) -> bool:
        b = self.batch
        self.batch = None
        CLOCK.now = b.end
        finished = False
        if b.kind == "prefill":
            for req, n in zip(b.reqs, b.chunks):
                finished |= self._prefilled(req, n)
        else:
            still = []
            for req in b.reqs:
                req.generated += b.steps
                if req.generated >= len(req.output):
                    self._finish(req)
                    finished = True
                else:
                    still.append(req)
            self.running[:] = still
        if self.hicache:
            # The batch's host backups go out before the next step (Scheduler.process_batch_result).
            self.cache.flush_pending_backups()
        return finished

    def _prefilled(self, req: SimRequest, n: int) -> bool:
        req.done += n
        req.computed += n
        self.rc.checkpoint(req, req.done, req.priority)
        if req.done < len(req.prompt):
            self.chunked = req
            return False
        req.generated = 1
        req.first_token_at = CLOCK.now
        self.out.events.append(("first", req.rid, CLOCK.now))
        if req.generated >= len(req.output):
            self._finish(req)
            return True
        self.running.append(req)
        return False

    def _finish(self, req: SimRequest) -> None:
        self.rc.finish(req)
        self.out.events.append(("finish", req.rid, CLOCK.now, req.cached, req.host_loaded,
                                req.computed, req.admitted_at))

    # ---- reading --------------------------------------------------------------------------

    def busy(self) -> bool:
        return bool(self.batch or self.waiting or self.running or self.chunked or self.inbox)

    def stats(self) -> dict:
        return {"prefill_s": self.prefill_s, "prefill_batches": self.prefill_batches,
                "decode_steps": self.decode_steps, "bytes": dict(self.links.bytes),
                "storage_hit_tokens": self.storage.hit_tokens if self.storage else 0,
                "waiting": len(self.waiting), "running": len(self.running)}


def tokens_of(data: bytes) -> array:
    """int32 little-endian token ids (what the engine sends) as the int64 array RadixKey takes."""
    import numpy as np

    out = array("q")
    out.frombytes(np.frombuffer(data, dtype="<i4").astype(np.int64).tobytes())
    return out


INF = math.inf
