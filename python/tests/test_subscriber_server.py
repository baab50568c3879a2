"""The subscriber on the real server path: what patch 0011 calls from http_server.lifespan
(``subscriber.start_for_server(server_args, tokenizer_manager)``) with a tokenizer manager whose
communicators are built by the patched TokenizerControlMixin (real FanOutCommunicator) and a
scheduler side routed by the patched Scheduler.init_request_dispatcher (test_http_endpoints._wire:
only the ZMQ hop is replaced, by SGLang's msgpack IPC codec). NATS is a real nats-server."""
import inspect
import json
import types

from helpers import insert, make_radix, stored_hashes
from test_http_endpoints import _wire
from test_subscriber import _client, _collect_replies, nats_server, run  # noqa: F401 (fixture)

from sglang.srt.kvctl import subscriber as kvctl_subscriber


def test_lifespan_hook_is_in_the_patched_http_server():
    import sglang.srt.entrypoints.http_server as hs

    src = inspect.getsource(hs.lifespan)
    assert "kvctl_lifespan.start(" in src and "kvctl_lifespan.stop(" in src


def test_off_without_a_nats_url(monkeypatch):
    monkeypatch.delenv("KVCTL_NATS_URL", raising=False)

    async def main():
        return await kvctl_subscriber.start_for_server(types.SimpleNamespace(kv_control_nats_url=None), object())

    assert run(main()) is None


def test_nats_command_reaches_the_scheduler_through_the_communicator(nats_server):
    cache, alloc = make_radix()
    insert(cache, alloc, list(range(1, 9)))
    hs = stored_hashes(cache)

    async def main():
        tm = _wire(cache)
        sa = types.SimpleNamespace(kv_control_nats_url=nats_server.url, kv_control_worker_id="srv-w1",
                                   kv_control_subject_prefix=None)
        sub = await kvctl_subscriber.start_for_server(sa, tm)
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        body = json.dumps({"version": 1, "id": "srv-1", "issued_at_ms": 1, "command": {"type": "Cache", "block_hashes": hs, "pin": True}})
        replies = await _collect_replies(nc, "kv-control-srv-w1", body.encode())
        assert len(replies) == 1
        ack = replies[0]
        assert ack["status"] == "applied" and ack["worker_id"] == "srv-w1" and ack["id"] == "srv-1", ack
        assert ack["affected"] == 2
        # the pin landed in the scheduler-side tree
        ins = await _collect_replies(nc, "kv-control-broadcast",
                                     json.dumps({"type": "Inspect", "block_hashes": hs}).encode())
        assert [b["pin_count"] for b in ins[0]["detail"]["blocks"]] == [1, 1]
        # same id again: the scheduler-side layer dedupes (the subscriber passed the id through)
        again = await _collect_replies(nc, "kv-control-srv-w1", body.encode())
        assert again[0]["status"] == "duplicate"
        await nc.close()
        await kvctl_subscriber.stop_for_server(sub)

    run(main())


def test_scheduler_acks_carry_the_worker_id_from_server_args(monkeypatch):
    """Schedulers are spawned before the HTTP lifespan starts the subscriber, so the id reaches
    them with their server_args (HTTP acks then say which worker answered, like NATS acks)."""
    from sglang.srt.kvctl import config, identity, scheduler_side

    monkeypatch.delenv("KVCTL_WORKER_ID", raising=False)
    monkeypatch.setattr(identity, "_worker_id", None)
    try:
        config.use(config.from_server_args(types.SimpleNamespace(kv_control_config='{"worker_id":"sa-w7"}')))
        cache, _ = make_radix()
    finally:
        config.use(config.KvctlConfig())
    sched = types.SimpleNamespace(tree_cache=cache, waiting_queue=[])
    ack = scheduler_side.handle_command(sched, {"type": "Inspect", "block_hashes": []})
    assert ack.worker_id == "sa-w7"


def test_every_corpus_rejection_over_nats_names_the_field_and_changes_nothing(nats_server):
    """The same rejections as over HTTP (test_http_endpoints), through the real subscriber; bodies
    over NATS's 1 MiB payload limit cannot be sent and are left to the HTTP test."""
    from test_http_endpoints import _corpus_rejections

    cache, alloc = make_radix()
    insert(cache, alloc, list(range(1, 17)))
    hs = stored_hashes(cache)
    inspect_body = json.dumps({"type": "Inspect", "block_hashes": hs}).encode()

    async def main():
        tm = _wire(cache)
        sa = types.SimpleNamespace(kv_control_nats_url=nats_server.url, kv_control_worker_id="corpus-w")
        sub = await kvctl_subscriber.start_for_server(sa, tm)
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        before = (await _collect_replies(nc, "kv-control-corpus-w", inspect_body))[0]
        sent = 0
        for name, body, field in _corpus_rejections():
            data = body if isinstance(body, bytes) else body.encode("utf-8")
            if len(data) > 1_000_000:
                continue
            ack = (await _collect_replies(nc, "kv-control-corpus-w", data))[0]
            assert ack["status"] == "rejected" and ack["reason"].startswith(field + ":"), (name, field, ack["reason"][:200])
            sent += 1
        after = (await _collect_replies(nc, "kv-control-corpus-w", inspect_body))[0]
        for d in (before, after):
            d["detail"]["pool"].pop("commands")  # counters of the scheduler-side layer
        assert (after["detail"], after["missing"]) == (before["detail"], before["missing"])
        assert sent > 150
        await nc.close()
        await kvctl_subscriber.stop_for_server(sub)

    run(main())
