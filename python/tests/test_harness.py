"""The worker HARNESS's pieces in process (no NATS): the scheduler thread owns the cache (work
runs on it, never on the asyncio loop), its loop tick runs the kvctl reaper with no caller, the
simulated requests write recognisable KV that survives demotion and load-back, and SGLang's own
ZmqEventPublisher carries the cache's events to a SUB socket."""
import asyncio
import socket
import threading
import time

import msgspec
import zmq

from kvctl_harness.cache import CacheConfig, build_cache
from kvctl_harness.worker import SchedulerThread, Serving


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scheduler_thread_owns_the_cache_and_ticks_the_reaper():
    from sglang.srt.disaggregation.kv_events import EventPublisherFactory
    from sglang.srt.kvctl import scheduler_side
    from sglang.srt.kvctl.io import KvctlCommandReqInput

    built = build_cache(CacheConfig(page_size=4, device_tokens=128, host_ratio=2.0))
    port = _free_port()
    pub = EventPublisherFactory.create(
        '{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:%d", "bind": true, "topic": ""}' % port, 0)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    # ZMQ drops what a PUB sends before the SUB's subscription reaches it: publish empty probe
    # batches until one arrives (the subscription is live from then on) instead of sleeping.
    from sglang.srt.disaggregation.kv_events import KVEventBatch

    joined_by = time.time() + 30
    while not sub.poll(100):
        assert time.time() < joined_by, "the SUB never received a probe batch"
        pub.publish(KVEventBatch(ts=time.time(), events=[]))
    sched = SchedulerThread(built, pub, tick_s=0.01).start()
    serving = Serving(built)

    async def main():
        name = await sched.call(lambda: threading.current_thread().name)
        assert name == "kvctl-harness-scheduler" and threading.current_thread().name != name
        r = await sched.call(lambda: serving.serve(list(range(1, 17))))
        assert r["tokens"] == 16 and len(r["block_hashes"]) == 4 and len(r["storage_keys"]) == 4
        kv0 = await sched.call(lambda: serving.kv(r["block_hashes"]))
        assert kv0["blocks"][0]["k"][0][:4] == [1.0, 1.0, 1.0, 1.0]  # token 1, layer 0
        body = '{"type":"Cache","block_hashes":%s,"pin":true,"ttl_seconds":1}' % r["block_hashes"]
        out = await sched.call(lambda: scheduler_side.scheduler_command(
            sched.scheduler, KvctlCommandReqInput(op="command", body=body)))
        assert '"applied"' in out.ack_json
        # memory pressure: the flood demotes what it can; the pinned blocks stay on host
        await sched.call(lambda: serving.flood(30, 16, 3))
        kv1 = await sched.call(lambda: serving.kv(r["block_hashes"]))
        assert [(b["k"], b["v"]) for b in kv1["blocks"]] == [(b["k"], b["v"]) for b in kv0["blocks"]]
        # no command from here on: only the loop tick can expire the TTL pin
        from sglang.srt.kvctl.hooks import state_for_cache

        st = state_for_cache(built.cache)
        deadline = time.time() + 5
        while st.pins.metrics["pins_expired"] < 4 and time.time() < deadline:
            await asyncio.sleep(0.05)
        assert st.pins.metrics["pins_expired"] == 4

    try:
        asyncio.run(main())
        frames = []
        deadline = time.time() + 5
        while time.time() < deadline and not frames:
            if sub.poll(100):
                f = sub.recv_multipart()
                if msgspec.msgpack.decode(f[2])[1]:  # skip the empty probe batches
                    frames = f
        assert len(frames) == 3  # [topic, seq, payload]: SGLang's own framing
        batch = msgspec.msgpack.decode(frames[2])
        assert batch and sched.batches_published >= 1
    finally:
        sched.stop()
        pub.shutdown()
        sub.close(0)
