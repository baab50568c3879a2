"""HiCache's L3 storage tier on a simulated worker: SGLang 0.5.23's own storage path (the
controller's storage backup and prefetch, the cache's prefetch on arrival, its threshold and its
``timeout`` stop policy, as a server with ``--hicache-storage-backend file`` runs them) over a
backend that holds page keys, not bytes, with every read and write completed on the virtual clock
at the profile's ``storage_read`` / ``storage_write`` link speed (pools.py ``Links``).

What is simplified, and nothing else:
  * the backend: ``SimStorage`` keeps the set of page keys a ``HiCacheFile`` directory would hold
    files for (the controller's own page-hash chain; no size cap, as ``HiCacheFile``'s default),
    attached as SGLang's ``dynamic`` backend with its zero-copy interface. A key becomes readable
    when its write completes. ``shared`` gives every worker of the fleet one store (one directory
    every worker mounts), ``worker`` each worker its own;
  * a backup's pages are written when the scheduler hands it over and become readable (to every
    worker of a shared store) when its write completes; its ack reaches the scheduler then;
  * the controller's four storage threads are never started (``install_inert_storage_threads``);
    ``StorageThreads.step`` runs their loop bodies where the scheduler would next observe their
    results: the hit query (prefetch thread) at once, as a file backend's ``exists`` costs no
    link time; each prefetch batch (``STORAGE_BATCH_SIZE`` pages, the io thread's unit) when its
    read completes on ``storage_read``, checking for termination between batches as the io thread
    does; each backup when its write completes on ``storage_write``; the sync thread's acks
    right after;
  * the scheduler's side is ``Scheduler._prefetch_kvcache`` on arrival and
    ``check_prefetch_progress`` / ``pop_prefetch_loaded_span`` before admission (worker.py). A
    lookup that misses is not re-issued while the request waits (the scheduler's paced retries
    and its re-query after a device hit is lost in the queue are not modelled);
  * the prefetch stop policy's timer (``PollTimer``) reads the virtual clock.
"""
from __future__ import annotations

import collections
import types
from typing import Any, Deque, Dict, List, Optional

from .virtual import CLOCK

#: ``--storage`` values: no L3, one store per worker, one store for the fleet.
STORAGE_MODES = ("none", "worker", "shared")

# The stores of this fleet process, by name: a worker's own ("w3") or the fleet's ("shared").
STORES: Dict[str, Dict[str, float]] = {}
INF = float("inf")


def store_name(mode: str, worker_id: str) -> Optional[str]:
    if mode not in STORAGE_MODES:
        raise ValueError(f"storage: {mode!r} is not one of {', '.join(STORAGE_MODES)}")
    if mode == "none":
        return None
    return "shared" if mode == "shared" else worker_id


def reset_stores() -> None:
    """A fleet starts with empty storage (as bench:agent's workers start on fresh directories)."""
    STORES.clear()


def _backend_base():
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

    return HiCacheStorage


class SimStorage(_backend_base()):
    """The page keys a ``HiCacheFile`` directory would hold, without their bytes."""

    def __init__(self, storage_config: Any, _kwargs: Any = None):
        #: key -> when its write completes (on the virtual clock): readable from then on.
        self.keys = STORES.setdefault(storage_config.extra_config["store"], {})
        #: When the write being issued completes (StorageThreads sets it before each backup).
        self.write_done_at = 0.0

    def exists(self, key: str) -> bool:
        return self.keys.get(key, INF) <= CLOCK.now

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        return [self.exists(k) for k in keys]

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        for k in keys:
            self.keys[k] = min(self.keys.get(k, INF), self.write_done_at)
        return [True] * len(keys)

    def get(self, key, target_location=None, target_sizes=None):
        raise NotImplementedError("SimStorage holds keys, not bytes: the zero-copy interface only")

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        raise NotImplementedError("SimStorage holds keys, not bytes: the zero-copy interface only")

    def set(self, key, value=None, target_location=None, target_sizes=None):
        raise NotImplementedError("SimStorage holds keys, not bytes: the zero-copy interface only")

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        raise NotImplementedError("SimStorage holds keys, not bytes: the zero-copy interface only")


def server_args_extra(store: str) -> dict:
    """The flags a server with this L3 passes (``--hicache-storage-backend`` and its config)."""
    import json

    cfg = {"backend_name": "kvctl_sim", "module_path": __name__, "class_name": "SimStorage",
           "interface_v1": 1, "store": store}
    return {"hicache_storage_backend": "dynamic",
            "hicache_storage_backend_extra_config": json.dumps(cfg)}


class _InertThread:
    """A storage thread that is never started: StorageThreads runs its loop body instead."""

    def __init__(self, *_a, **_k) -> None:
        pass

    def start(self) -> None:
        pass

    def join(self, *_a, **_k) -> None:
        pass

    def is_alive(self) -> bool:
        return False


def install_inert_storage_threads() -> None:
    """Once per fleet process: the controllers' storage threads are built but never run, and the
    stop policy's timer reads the virtual clock."""
    import threading

    import sglang.srt.managers.cache_controller as cc_mod
    import sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller as hcc_mod
    import sglang.srt.utils.poll_timer as poll_timer

    inert = types.SimpleNamespace(**{k: getattr(threading, k) for k in dir(threading)
                                     if not k.startswith("__")})
    inert.Thread = _InertThread
    cc_mod.threading = inert
    hcc_mod.threading = inert
    poll_timer.time = types.SimpleNamespace(perf_counter=CLOCK.monotonic)


def _drain(q) -> list:
    out = []
    while not q.empty():
        item = q.get_nowait()
        if item is not None:
            out.append(item)
    return out


class _Read:
    """One prefetch operation's io: its batches, each done at a time on ``storage_read``."""

    __slots__ = ("op", "done_at", "next", "pages", "ok")

    def __init__(self, op: Any, done_at: List[float]):
        self.op, self.done_at, self.next, self.pages, self.ok = op, done_at, 0, 0, True


class StorageThreads:
    """The controller's storage threads' loop bodies, run on the virtual clock (module docstring)."""

    def __init__(self, cache: Any, links: Any, page_size: int):
        from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE

        self.cache = cache
        self.cc = cache.cache_controller
        self.links = links
        self.page = page_size
        self.batch = STORAGE_BATCH_SIZE
        self.reads: Deque[_Read] = collections.deque()
        self.writes: Deque[tuple] = collections.deque()
        self.hit_tokens = 0

    def step(self) -> None:
        """Runs every thread body whose input is queued or whose copy has completed by now."""
        cc = self.cc
        for op in _drain(cc.backup_queue):
            # The pages are written now and readable when the write completes (every worker
            # sharing the store sees them then, whether or not this one runs at that moment).
            done = self.links.transfer("storage_write", len(op.hash_value or ()) * self.page)
            cc.storage_backend.write_done_at = done
            cc._page_backup_or_log(op)
            self.writes.append((done, op))
        while self.writes and self.writes[0][0] <= CLOCK.now:
            cc.ack_backup_queue.put(self.writes.popleft()[1])
        for op in _drain(cc.prefetch_queue):
            self._hit_query(op)
        for op in _drain(cc.prefetch_buffer):
            self._start_read(op)
        while self.reads and self._read_due(self.reads[0]):
            self.reads.popleft()
        for ack in _drain(cc.prefetch_sync_queue):
            cc._reduce_prefetch_ack(ack)
            cc.ack_prefetch_queue.put(ack)

    def _hit_query(self, op: Any) -> None:
        """prefetch_thread_func's body for one operation."""
        cc = self.cc
        hashes, hit = ([], 0) if op.is_terminated() else cc._storage_hit_query(op)
        hit = cc._sync_prefetch_hit_query(op, hit)
        op.hash_value = hashes[: hit // self.page]
        op.storage_hit_count = hit
        cc.prefetch_hit_queue.put(op)

    def _start_read(self, op: Any) -> None:
        n = len(op.hash_value)
        done = [self.links.transfer("storage_read", min(self.batch, n - i) * self.page)
                for i in range(0, n, self.batch)]
        self.reads.append(_Read(op, done))

    def _read_due(self, r: _Read) -> bool:
        """Runs the batches of ``r`` whose reads completed (CacheController._page_transfer, one
        batch at a time); True once its last batch and the completion ack went out."""
        from sglang.srt.managers.cache_controller import PrefetchAck
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

        cc, op = self.cc, r.op
        while r.next < len(r.done_at) and r.done_at[r.next] <= CLOCK.now:
            i = r.next * self.batch
            r.next += 1
            if r.ok and op.is_terminated():
                r.ok = False
            if r.ok:
                hashes = op.hash_value[i:i + self.batch]
                host = op.host_indices[i * self.page:(i + len(hashes)) * self.page]
                hit = cc._page_transfer_kv_batch(
                    op, hashes, host, HiCacheStorageExtraInfo(prefix_keys=None), [])
                r.ok = hit == len(hashes)
                r.pages += hit
            cc.prefetch_sync_queue.put(PrefetchAck(rid=op.request_id,
                                                   completed_tokens=r.pages * self.page,
                                                   operation=op))
        if r.next < len(r.done_at):
            return False
        if hasattr(cc, "_page_transfer_sidecar"):
            cc._page_transfer_sidecar(op, r.pages)
        cc.prefetch_sync_queue.put(PrefetchAck(rid=op.request_id, completed_req=True, operation=op))
        return True

    def next_at(self, after: float) -> Optional[float]:
        """The first moment past ``after`` when a copy completes or a prefetch's deadline passes
        (None: none is pending)."""
        times = [done for done, _ in self.writes]
        times += [d for r in self.reads for d in r.done_at[r.next:]]
        for wait in self.cache._storage_prefetch_wait.values():
            if wait.timer.running and not wait.expired:
                times.append(wait.timer.started_at + wait.timeout_s)
        later = [x for x in times if x > after]
        return min(later) if later else None

    # ---- the scheduler's side ------------------------------------------------------------

    def on_arrival(self, req: Any, match: Any) -> None:
        """Scheduler._prefetch_kvcache: look the prompt past what device and host hold up in L3."""
        cache = self.cache
        node = match.last_host_node
        if not (cache.is_backuped(node) or cache.is_root(node)):
            return
        matched = match.device_prefix_len + match.host_hit_length
        end = len(req.prompt) - 1
        if end <= matched:
            return
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

        req.handle = CacheRequestHandle(rid=req.rid, attempt_id=0)
        cache.prefetch_from_storage(req.handle, node, req.prompt[matched:end],
                                    cache.get_last_hash_value(node), None,
                                    matched_prefix_tokens=req.prompt[:matched])

    def ready(self, req: Any) -> bool:
        """check_prefetch_progress, then the loaded span (the scheduler's admission gate)."""
        handle = getattr(req, "handle", None)
        if handle is None:
            return True
        if not self.cache.check_prefetch_progress(handle):
            return False
        loaded, _start = self.cache.pop_prefetch_loaded_span(handle)
        req.storage_hit = loaded
        self.hit_tokens += loaded
        req.handle = None
        return True
