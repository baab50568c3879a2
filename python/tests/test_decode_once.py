"""The NATS path does each step once: a command through the real subscriber, the patched
communicators and the scheduler dispatcher (test_http_endpoints._wire: only the ZMQ hop is
replaced, by SGLang's msgpack IPC codec), NATS a real nats-server. The codec's decoder, the
contract shaping of the ack and its byte encoding are counted wherever they are called from."""
import json
import types

from helpers import insert, make_radix, stored_hashes
from test_http_endpoints import _wire
from test_subscriber import _client, nats_server, run  # noqa: F401 (fixture)

from sglang.srt.kvctl import ack as kvctl_ack
from sglang.srt.kvctl import codec, handlers, scheduler_side
from sglang.srt.kvctl import subscriber as kvctl_subscriber


def _counting(monkeypatch, calls: dict, name: str, fn, *modules):
    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)

    for m in modules:
        if hasattr(m, name):
            monkeypatch.setattr(m, name, counted)


def test_a_nats_command_is_decoded_shaped_and_encoded_once(nats_server, monkeypatch):
    cache, alloc = make_radix()
    insert(cache, alloc, list(range(1, 9)))
    hs = stored_hashes(cache)
    calls: dict = {}
    modules = (codec, handlers, kvctl_subscriber, scheduler_side, kvctl_ack)
    _counting(monkeypatch, calls, "decode", codec.decode, *modules)
    _counting(monkeypatch, calls, "contract_ack", kvctl_ack.contract_ack, *modules)
    _counting(monkeypatch, calls, "encode_ack", kvctl_ack.encode_ack, *modules)

    async def main():
        tm = _wire(cache)
        sa = types.SimpleNamespace(kv_control_nats_url=nats_server.url, kv_control_worker_id="once-w1",
                                   kv_control_subject_prefix=None)
        sub = await kvctl_subscriber.start_for_server(sa, tm)
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        body = json.dumps({"version": 1, "id": "once-1", "issued_at_ms": 1,
                           "command": {"type": "Cache", "block_hashes": hs, "pin": True}})
        reply = await nc.request("kv-control-once-w1", body.encode(), timeout=30)
        await nc.close()
        await kvctl_subscriber.stop_for_server(sub)
        return json.loads(reply.data)

    ack = run(main())
    assert ack["status"] == "applied" and ack["worker_id"] == "once-w1", ack
    assert ack["id"] == "once-1" and ack["affected"] == len(hs)
    assert calls == {"decode": 1, "contract_ack": 1, "encode_ack": 1}, calls
