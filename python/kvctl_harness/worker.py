"""HARNESS: the worker stand-in process (see harness/__init__.py for what is real and what is not).

Threads:
  * the asyncio loop (main thread): the control subscriber (NATS) and the harness channel. It
    never touches the cache: every command / simulated request is a closure queued to
  * the scheduler thread ("kvctl-harness-scheduler"), which owns the cache. Its loop: run queued
    work in arrival order; after each item and on every idle tick (``--tick-ms``): the kvctl loop
    tick (``scheduler_side.on_scheduler_tick``: pin TTLs, lease/tool reapers, safety net), the
    HiCache event check, and KV event publishing (``take_events`` -> ZmqEventPublisher), like
    Scheduler.process_input_requests / check_hicache_events / publish_kv_events.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import queue
import random
import signal
import sys
import threading
import time
import types
from array import array
from typing import Any, Callable, Dict, List, Optional

from sglang.srt.kvctl import config as kvctl_config
from sglang.srt.kvctl import identity
from sglang.srt.kvctl.server_args import ControlArgs, add_cli_args, from_server_args
from sglang.srt.kvctl.subscriber import CommandPath, ControlSubscriber
from .cache import BuiltCache, CacheConfig, build_cache

logger = logging.getLogger("kvctl.harness")


class SchedulerThread:
    """One thread owns the cache; everything else queues closures to it."""

    def __init__(self, built: BuiltCache, publisher: Any, tick_s: float = 0.02):
        self.built = built
        self.cache = built.cache
        self.publisher = publisher
        self.tick_s = tick_s
        self.q: "queue.Queue" = queue.Queue()
        # the object scheduler_side reads (tree_cache, waiting_queue): a Scheduler stand-in
        self.scheduler = types.SimpleNamespace(tree_cache=self.cache, waiting_queue=[])
        self.batches_published = 0
        self.events_published = 0
        self.tick_errors = 0
        self._stop = False
        self._hicache_check_ok = True
        self.thread = threading.Thread(target=self._loop, name="kvctl-harness-scheduler", daemon=True)

    def start(self) -> "SchedulerThread":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self.q.put(None)
        self.thread.join(5)

    async def call(self, fn: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.q.put((fn, fut, loop))
        return await fut

    def _loop(self) -> None:
        while not self._stop:
            try:
                item = self.q.get(timeout=self.tick_s)
            except queue.Empty:
                item = None
            result, error = None, None
            if item is not None:
                fn, fut, loop = item
                try:
                    result = fn()
                except BaseException as e:  # reported to the caller, never kills the loop
                    error = e
            self._tick()
            if item is not None:
                loop.call_soon_threadsafe(_settle, fut, result, error)

    def _tick(self) -> None:
        from sglang.srt.kvctl import scheduler_side

        try:
            scheduler_side.on_scheduler_tick(self.scheduler)
        except Exception:
            self.tick_errors += 1
            logger.exception("kvctl harness: scheduler tick failed")
        if self._hicache_check_ok:
            try:
                self.cache.check_hicache_events()
            except Exception as e:  # TP all-reduce pieces not available: fall back once and for all
                logger.info("kvctl harness: check_hicache_events unavailable on CPU (%s); using "
                            "writing_check/loading_check", e)
                self._hicache_check_ok = False
        if not self._hicache_check_ok:
            try:
                self.cache.writing_check(write_back=True)
                self.cache.loading_check()
            except Exception:
                self.tick_errors += 1
        self.publish_events()

    def publish_events(self) -> None:
        from sglang.srt.disaggregation.kv_events import KVEventBatch

        events = self.cache.take_events()
        if events and self.publisher is not None:
            self.publisher.publish(KVEventBatch(ts=time.time(), events=events))
            self.batches_published += 1
            self.events_published += len(events)


def _settle(fut, result, error) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class Serving:
    """HARNESS request simulation on the scheduler thread: what the scheduler does for a request
    (match, load back host hits, lock the prefix, evict to make room, allocate, write KV,
    insert, unlock). KV rows are recognisable: K = token id + layer, V = -(token id + layer)."""

    def __init__(self, built: BuiltCache):
        self.b = built
        self.cache = built.cache
        self.page = built.config.page_size
        self.holds: Dict[str, Any] = {}
        self._next_fresh = 1_000_000
        self.served = 0

    def _key(self, tokens):
        from sglang.srt.mem_cache.radix_cache import RadixKey

        return RadixKey(array("q", tokens))

    def match(self, tokens):
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        return self.cache.match_prefix(MatchPrefixParams(key=self._key(tokens)))

    def _load_back(self, node_id) -> bool:
        c = self.cache
        if not c.load_back(node_id, req=None):
            return False
        if c.ready_to_load_host_cache() == -1:
            return False
        for ack in list(c.cache_controller.ack_load_queue):
            ack.finish_event.synchronize()
        c.loading_check()
        return True

    def path_hashes(self, tokens) -> List[int]:
        return self.path_keys(tokens)[0]

    def path_keys(self, tokens):
        """(published block hashes, storage keys) of the cached path of these tokens."""
        from sglang.srt.kvctl.hooks import state_for_cache

        st = state_for_cache(self.cache)
        m = self.match(tokens)
        node = self.cache.tree_core.node_by_id(m.best_match_node if getattr(m, "host_hit_length", 0)
                                               else m.last_device_node)
        out: List[int] = []
        keys: List[str] = []
        root = st.ops.root()
        while node is not None and node is not root:
            out[:0] = list(getattr(node, "kvctl_hashes", None) or [])
            keys[:0] = list(getattr(node, "hash_value", None) or [])
            node = node.parent
        return out, keys

    def serve(self, tokens: List[int], hold: Optional[str] = None) -> dict:
        import torch

        from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams

        tokens = list(tokens)[: len(tokens) // self.page * self.page]
        if not tokens:
            return {"tokens": 0, "cached_tokens": 0, "device_hit": 0, "host_hit": 0, "block_hashes": []}
        m = self.match(tokens)
        device_hit = m.device_prefix_len
        host_hit = getattr(m, "host_hit_length", 0) or 0
        loaded = 0
        if host_hit and self._load_back(m.best_match_node):
            m = self.match(tokens)
            loaded = m.device_prefix_len - device_hit
        core = self.cache.tree_core
        node = m.last_device_node
        prefix = core.collect_full_device_indices(node, core.root_node.id)
        receipt = self.cache.inc_lock_ref(node).to_dec_params()
        try:
            need = len(tokens) - len(prefix)
            if need > self.b.alloc.available_size():
                self.cache.evict(EvictParams(num_tokens=need - self.b.alloc.available_size()))
            new = self.b.alloc.alloc(need) if need else torch.empty(0, dtype=torch.int64)
            if new is None:
                raise RuntimeError(f"request of {len(tokens)} tokens cannot be scheduled: "
                                   f"{need} slots needed, {self.b.alloc.available_size()} free after eviction")
            if need:
                data = torch.tensor(tokens[len(prefix):], dtype=torch.float32).view(-1, 1, 1)
                for layer in range(self.b.pool.layer_num):
                    self.b.pool.k_buffer[layer][new] = (data + layer).expand(-1, 1, self.b.pool.head_dim)
                    self.b.pool.v_buffer[layer][new] = (-data - layer).expand(-1, 1, self.b.pool.head_dim)
            value = torch.cat([prefix.to(torch.int64), new.to(torch.int64)])
            self.cache.insert(InsertParams(key=self._key(tokens), value=value, prev_prefix_len=len(prefix)))
            self.cache.writing_check(write_back=True)
        finally:
            self.cache.dec_lock_ref(node, receipt)
        self.settle()
        self.served += 1
        if hold:
            m2 = self.match(tokens)
            self.holds[hold] = (m2.last_device_node, self.cache.inc_lock_ref(m2.last_device_node).to_dec_params())
        hashes, keys = self.path_keys(tokens)
        return {"tokens": len(tokens), "cached_tokens": min(device_hit + loaded, len(tokens)),
                "device_hit": device_hit, "host_hit": host_hit, "loaded_from_host": loaded,
                "block_hashes": hashes, "storage_keys": keys}

    def settle(self, timeout_s: float = 2.0) -> bool:
        """Let the request's host write-through and storage write-back finish (their host locks
        released), as the scheduler loop would between this request and the router's next
        command. Without it a command sent a millisecond after a request races SGLang's own
        in-flight backups (held host locks), which no real router could rely on either."""
        c = self.cache
        end = time.monotonic() + timeout_s
        while getattr(c, "ongoing_write_through", None) or getattr(c, "ongoing_backup", None):
            if time.monotonic() > end:
                return False
            try:
                c.check_hicache_events()
            except Exception:
                c.writing_check(write_back=True)
                if hasattr(c, "drain_storage_control_queues"):
                    c.drain_storage_control_queues()
            time.sleep(0.001)
        return True

    def release(self, hold: str) -> dict:
        h = self.holds.pop(hold, None)
        if h is None:
            return {"released": False}
        self.cache.dec_lock_ref(h[0], h[1])
        return {"released": True}

    def fresh(self, n: int) -> List[int]:
        start = self._next_fresh
        self._next_fresh += n
        return list(range(start, start + n))

    def flood(self, n: int, tokens_per_request: int, seed: int = 1) -> dict:
        """N requests of fresh tokens (multi-turn conversations growing by a turn each)."""
        rng = random.Random(seed)
        convs: List[List[int]] = []
        total = 0
        for _ in range(n):
            if not convs or rng.random() < 0.15:
                convs.append(self.fresh(tokens_per_request))
            i = rng.randrange(len(convs))
            convs[i] = convs[i] + self.fresh(max(self.page, tokens_per_request // 2))
            if len(convs[i]) > self.b.config.device_tokens // 2:
                convs[i] = self.fresh(tokens_per_request)
            self.serve(convs[i])
            total += len(convs[i])
        return {"requests": n, "tokens": total}

    def cached(self, tokens: List[int]) -> dict:
        """What the next request with these tokens would find (no side effect on the tree)."""
        m = self.match(list(tokens)[: len(tokens) // self.page * self.page])
        host = getattr(m, "host_hit_length", 0) or 0
        return {"device_hit": m.device_prefix_len, "host_hit": host, "cached_tokens": m.device_prefix_len + host}

    def kv(self, hashes: List[int]) -> dict:
        """KV rows of blocks, read from the tier that holds them (GPU first, then host)."""
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

        from sglang.srt.kvctl.hooks import state_for_cache

        st = state_for_cache(self.cache)
        root = st.ops.root()
        P = self.page
        blocks, missing = [], []
        host = self.b.host_pool
        for h in hashes:
            node = st.index.get(h, root)
            if node is None or h not in (node.kvctl_hashes or []):
                missing.append(h)
                continue
            i = node.kvctl_hashes.index(h)
            comp = node.component_data[ComponentType.FULL]
            if comp.value is not None:
                idx, src, tier = comp.value[i * P:(i + 1) * P], self.b.pool, "GPU"
            elif comp.host_value is not None:
                idx, src, tier = comp.host_value[i * P:(i + 1) * P], host, "CPU_PINNED"
            else:
                missing.append(h)
                continue
            k = [src.k_buffer[l][idx].reshape(-1).tolist() for l in range(self.b.pool.layer_num)]
            v = [src.v_buffer[l][idx].reshape(-1).tolist() for l in range(self.b.pool.layer_num)]
            blocks.append({"block_hash": h, "tier": tier, "k": k, "v": v})
        return {"blocks": blocks, "missing": missing}

    def evict(self, tokens: int) -> dict:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        r = self.cache.evict(EvictParams(num_tokens=tokens))
        self.cache.writing_check(write_back=True)
        return {"evicted": getattr(r, "num_tokens_evicted", None)}


class Harness:
    def __init__(self, args: argparse.Namespace, control: ControlArgs):
        from sglang.srt.disaggregation.kv_events import EventPublisherFactory

        self.args = args
        self.control = control
        cfg = CacheConfig(page_size=args.page_size, device_tokens=args.device_tokens,
                          host_ratio=args.host_ratio, layers=args.layers,
                          write_policy=args.write_policy, storage_dir=args.storage_dir)
        self.built = build_cache(cfg)
        self.events_endpoint = f"tcp://127.0.0.1:{args.events_port}"
        ev_cfg = {"publisher": "zmq", "endpoint": self.events_endpoint, "bind": True, "topic": ""}
        if args.replay_port:
            ev_cfg["replay_endpoint"] = f"tcp://127.0.0.1:{args.replay_port}"
        self.publisher = EventPublisherFactory.create(json.dumps(ev_cfg), 0)
        self.sched = SchedulerThread(self.built, self.publisher, tick_s=args.tick_ms / 1000).start()
        self.serving = Serving(self.built)
        self.subscriber: Optional[ControlSubscriber] = None
        self.harness_nc = None
        self.done = asyncio.Event()

    # the subscriber's path to the scheduler (the real server's is tokenizer -> communicator): the
    # request the communicator would carry, decoded commands in, contract-shaped acks out
    async def send_to_scheduler(self, commands: list) -> list:
        from sglang.srt.kvctl import scheduler_side
        from sglang.srt.kvctl.io import KvctlCommandReqInput

        req = KvctlCommandReqInput(op="commands", commands=[c.to_wire() for c in commands])
        out = await self.sched.call(lambda: scheduler_side.scheduler_command(self.sched.scheduler, req))
        return out.acks

    async def start(self) -> None:
        import nats

        self.subscriber = await ControlSubscriber(self.control, CommandPath(self.send_to_scheduler)).start()
        await self.subscriber.wait_connected(30)
        self.harness_nc = await nats.connect(servers=self.control.servers, max_reconnect_attempts=-1,
                                             reconnect_time_wait=0.25, name="kvctl-harness-channel",
                                             user_credentials=self.control.creds, user=self.control.user,
                                             password=self.control.password, token=self.control.token)
        await self.harness_nc.subscribe(f"kvctl-harness-{self.control.worker_id}", cb=self._on_harness)
        await self.harness_nc.flush()  # the server has the subscription before we say "ready"

    async def stop(self) -> None:
        if self.subscriber is not None:
            await self.subscriber.stop()
        if self.harness_nc is not None:
            try:
                await self.harness_nc.close()
            except Exception:
                pass
        self.sched.stop()
        try:
            self.publisher.shutdown()
        except Exception:
            pass

    async def _on_harness(self, msg) -> None:
        try:
            req = json.loads(msg.data)
            res = await self.harness_op(req)
            out = {"ok": True, **res}
        except Exception as e:
            logger.exception("kvctl harness: op failed")
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if msg.reply:
            await self.harness_nc.publish(msg.reply, json.dumps(out).encode())

    async def harness_op(self, req: dict) -> dict:
        op = req.get("op")
        s = self.serving
        if op == "serve":
            return await self.sched.call(lambda: s.serve(req["token_ids"], hold=req.get("hold")))
        if op == "release":
            return await self.sched.call(lambda: s.release(req["hold"]))
        if op == "flood":
            return await self.sched.call(lambda: s.flood(int(req["n"]), int(req.get("tokens_per_request", 32)),
                                                         int(req.get("seed", 1))))
        if op == "cached":
            return await self.sched.call(lambda: s.cached(req["token_ids"]))
        if op == "hashes":
            return await self.sched.call(lambda: {"block_hashes": s.path_hashes(req["token_ids"])})
        if op == "kv":
            return await self.sched.call(lambda: s.kv([int(h) for h in req["block_hashes"]]))
        if op == "evict":
            return await self.sched.call(lambda: s.evict(int(req["tokens"])))
        if op == "stats":
            def stats():
                from sglang.srt.kvctl.hooks import state_for_cache

                b = self.built
                st = state_for_cache(b.cache)
                sessions = getattr(st, "sessions", None)
                kvctl = {"pins": dict(st.pins.metrics),
                         "sessions": dict(sessions.metrics) if sessions is not None else None,
                         "leases": len(sessions.leases) if sessions is not None else None,
                         "tool_offloads": len(sessions.tools) if sessions is not None else None}
                return {"kvctl": kvctl, "served": s.served, "device_tokens": b.alloc.size,
                        "device_free": b.alloc.available_size(),
                        "host_tokens": b.host_pool.size if b.host_pool is not None else 0,
                        "batches_published": self.sched.batches_published,
                        "events_published": self.sched.events_published,
                        "tick_errors": self.sched.tick_errors,
                        "storage": bool(getattr(b.cache, "enable_storage", False))}

            st = await self.sched.call(stats)
            st["subscriber"] = self.subscriber.metrics if self.subscriber else None
            return st
        if op == "shutdown":
            self.done.set()
            return {"shutting_down": True}
        raise ValueError(f"unknown harness op {op!r}")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m kvctl_harness",
                                 description="kvctl worker HARNESS (test/demo stand-in; CPU cache, no model)")
    add_cli_args(ap)  # --kv-control-nats-url, --kv-control-worker-id, ... (the server's flags)
    ap.add_argument("--events-port", type=int, required=True, help="ZMQ PUB port for KV events (127.0.0.1)")
    ap.add_argument("--replay-port", type=int, default=0, help="ZMQ ROUTER replay port (0 = none)")
    ap.add_argument("--page-size", type=int, default=4)
    ap.add_argument("--device-tokens", type=int, default=256, help="'GPU' pool size (a CPU pool here)")
    ap.add_argument("--host-ratio", type=float, default=2.0, help="host pool = ratio x device pool")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--write-policy", default="write_through")
    ap.add_argument("--storage-dir", default=None, help="enable the file storage backend here (Warm)")
    ap.add_argument("--tick-ms", type=float, default=20.0)
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--parent-pid", type=int, default=0,
                    help="exit when this process is gone (the launcher), so no harness outlives a test run")
    return ap.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    control = from_server_args(args)
    if control is None:
        print("kvctl harness: --kv-control-nats-url (or KVCTL_NATS_URL) is required", file=sys.stderr)
        return 2
    identity.set_worker_id(control.worker_id)  # the acks' worker_id; also exports KVCTL_WORKER_ID
    # kvctl on for the cache the harness builds, from the same flags a server would get
    kvctl_config.use(kvctl_config.from_server_args(args))
    h = Harness(args, control)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, h.done.set)
    await h.start()
    if args.parent_pid:
        async def watchdog():
            while not h.done.is_set():
                if os.getppid() != args.parent_pid:
                    logger.warning("kvctl harness: launcher %d is gone; exiting", args.parent_pid)
                    h.done.set()
                await asyncio.sleep(1.0)

        asyncio.ensure_future(watchdog())
    print(json.dumps({"harness": "ready", "worker_id": control.worker_id,
                      "control_subject": control.worker_subject,
                      "harness_subject": f"kvctl-harness-{control.worker_id}",
                      "events_endpoint": h.events_endpoint,
                      "storage": bool(getattr(h.built.cache, "enable_storage", False)),
                      "page_size": args.page_size, "device_tokens": args.device_tokens,
                      "host_tokens": h.built.host_pool.size if h.built.host_pool is not None else 0}),
          flush=True)
    await h.done.wait()
    await asyncio.sleep(0.05)  # let the shutdown reply go out
    await h.stop()
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    import warnings

    warnings.filterwarnings("ignore")
    return asyncio.run(amain(args))
