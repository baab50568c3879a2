"""/hicache/* endpoints through SGLang's real FastAPI app (http_server imports on CPU): route ->
kvctl tokenizer function -> the patched communicator spec (real FanOutCommunicator) -> IPC codec
-> the patched scheduler dispatcher entry -> tree cache -> Ack back the same way."""
import json
import sys
import types

import pytest
from helpers import insert, make_radix, stored_hashes

from sglang.srt.kvctl.http import ROUTES
from sglang.srt.kvctl.io import KvctlCommandReqInput, KvctlCommandReqOutput
from sglang.srt.managers.io_struct import _msgpack_decoder, _msgpack_encoder


class _SchedulerStandIn:
    """Only what the patched Scheduler.init_request_dispatcher and the kvctl target read: any
    other handler the dispatcher table names is a dummy (those requests are never sent here)."""

    def __init__(self, cache):
        self.tree_cache = cache
        self.waiting_queue = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy()


class _Dummy:
    def __call__(self, *a, **k):
        return None

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy()


def _wire(cache):
    """Tokenizer side: the patched TokenizerControlMixin.init_communicators builds the real
    FanOutCommunicator + result dispatcher; scheduler side: the patched
    Scheduler.init_request_dispatcher routes the request. Only the ZMQ hop between them is
    replaced: SGLang's msgpack IPC codec both ways, delivery on the event loop."""
    import asyncio

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.tokenizer_control_mixin import TokenizerControlMixin
    from sglang.utils import TypeBasedDispatcher

    sched = _SchedulerStandIn(cache)
    Scheduler.init_request_dispatcher(sched)
    tm = types.SimpleNamespace(auto_create_handle_loop=lambda: None,
                               _result_dispatcher=TypeBasedDispatcher([]))

    def dispatch_to_scheduler(req):
        req = _msgpack_decoder.decode(_msgpack_encoder.encode(req))
        out = sched._request_dispatcher(req)
        out = _msgpack_decoder.decode(_msgpack_encoder.encode(out))
        asyncio.get_running_loop().call_soon(tm._result_dispatcher, out)

    tm._dispatch_to_scheduler = dispatch_to_scheduler
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(num_dp_ranks=1):  # one DP scheduler, as in the unit fixtures
        TokenizerControlMixin.init_communicators(tm)
    return tm


@pytest.fixture(scope="module")
def server():
    from fastapi.testclient import TestClient

    import sglang.srt.entrypoints.http_server as hs
    from sglang.srt.utils.auth import add_api_key_middleware

    import asyncio

    from sglang.srt.kvctl import lifespan

    cache, alloc = make_radix()
    tm = _wire(cache)
    hs._global_state = types.SimpleNamespace(tokenizer_manager=tm)
    # what patch 0011's lifespan hook does with --kv-control-config '{"worker_id":"http-w0"}' --admin-api-key admin-secret
    sa = types.SimpleNamespace(kv_control_config='{"worker_id":"http-w0"}', admin_api_key="admin-secret")
    running = asyncio.run(lifespan.start(sa, tm, hs.app))
    assert running is not None and running.subscriber is None
    add_api_key_middleware(hs.app, api_key=None, admin_api_key="admin-secret")
    client = TestClient(hs.app)
    return client, cache, alloc


H = {"Authorization": "Bearer admin-secret"}


def test_ipc_types_are_registered_with_sglangs_decoder():
    req = _msgpack_decoder.decode(_msgpack_encoder.encode(KvctlCommandReqInput(op="pin", body="{}")))
    assert isinstance(req, KvctlCommandReqInput)
    out = _msgpack_decoder.decode(_msgpack_encoder.encode(KvctlCommandReqOutput(ack_json="{}")))
    assert isinstance(out, KvctlCommandReqOutput)


def test_admin_key_is_required_when_set(server):
    client, _, _ = server
    r = client.post("/hicache/inspect", content="{}")
    assert r.status_code == 401


def _app_with_routes(server, **kw):
    """A fresh FastAPI app with the kvctl routes registered as lifespan.start would, without
    SGLang's auth middleware (which SGLang installs only when a key is set at startup)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from sglang.srt.kvctl.http import register_routes

    app = FastAPI()
    tm = sys.modules["sglang.srt.entrypoints.http_server"]._global_state.tokenizer_manager
    register_routes(app, lambda: tm, "http-w0", **kw)
    return TestClient(app)


def test_without_an_admin_key_the_routes_are_refused_unless_opened(server):
    closed = _app_with_routes(server)
    for path in ROUTES:
        r = closed.post(path, content="{}")
        assert r.status_code == 403, (path, r.status_code)
        assert "--kvctl-http-open" in r.json()["error"]["message"]
    opened = _app_with_routes(server, http_open=True)
    r = opened.post("/hicache/inspect", content="{}")
    assert r.status_code == 200 and r.json()["status"] == "applied"


def test_with_an_admin_key_only_that_key_opens_them(server):
    client = _app_with_routes(server, admin_api_key="admin-secret")
    for auth in (None, "Bearer inference-key", "Bearer admin-secretx", "Basic admin-secret", "Bearer"):
        r = client.post("/hicache/inspect", content="{}", headers={"Authorization": auth} if auth else {})
        assert r.status_code == 401, (auth, r.status_code)
    assert client.post("/hicache/inspect", content="{}", headers=H).status_code == 200


def test_http_open_comes_from_the_flag_the_config_or_the_env(monkeypatch):
    from sglang.srt.kvctl.config import from_server_args

    base = {"kv_control_config": "{}"}
    assert from_server_args(types.SimpleNamespace(**base)).http_open is False
    assert from_server_args(types.SimpleNamespace(**base, kvctl_http_open=True)).http_open is True
    assert from_server_args(types.SimpleNamespace(kv_control_config='{"http_open": true}')).http_open is True
    monkeypatch.setenv("KVCTL_HTTP_OPEN", "1")
    assert from_server_args(types.SimpleNamespace(**base)).http_open is True
    with pytest.raises(ValueError, match="http_open must be a bool"):
        from_server_args(types.SimpleNamespace(kv_control_config='{"http_open": 1}'))


def test_pin_unpin_inspect_round_trip_with_int64_literals(server):
    client, cache, alloc = server
    insert(cache, alloc, list(range(1, 9)))
    hs = stored_hashes(cache)
    body = '{"version":1,"id":"r1","issued_at_ms":1,"command":{"block_hashes":[%s,%s,-9223372036854775808]}}' % tuple(hs)
    r = client.post("/hicache/pin_blocks", content=body, headers=H)
    ack = r.json()
    assert r.status_code == 200 and ack["status"] == "partial" and ack["id"] == "r1", ack
    assert ack["affected"] == 2 and ack["missing"] == [-(2**63)]
    assert ack["tiers"] == {"GPU": 1} and set(ack) >= {"requested", "skipped", "lease", "epoch", "elapsed_us"}
    r = client.post("/hicache/inspect", content=json.dumps({"block_hashes": hs}), headers=H)
    assert [b["pin_count"] for b in r.json()["detail"]["blocks"]] == [1, 1]
    r = client.post("/hicache/unpin_blocks", content=json.dumps({"block_hashes": hs}), headers=H)
    assert r.json()["status"] == "applied"
    r = client.post("/hicache/unpin_blocks", content=json.dumps({"block_hashes": hs}), headers=H)
    assert r.json()["status"] == "noop"


def test_bad_input_is_a_400_rejection_naming_the_field(server):
    client, _, _ = server
    r = client.post("/hicache/pin_blocks", content='{"block_hashes":[18446744073709551616]}', headers=H)
    assert r.status_code == 400 and r.json()["status"] == "rejected"
    assert r.json()["reason"].startswith("block_hashes[0]")


def test_every_command_has_its_route_answering_the_ack(server):
    from sglang.srt.kvctl.http import ROUTES

    client, cache, alloc = server
    paths = {r.path for r in client.app.routes if hasattr(r, "path")}
    for p in ["/hicache/prune", "/hicache/think", "/hicache/pause", "/hicache/renew_lease",
              "/hicache/revoke_lease", "/hicache/warm", "/hicache/inspect", "/session/tool_start",
              "/session/tool_end", "/session/kv_meta", "/hicache/command"]:
        assert p in paths and p in ROUTES
    # plain RadixCache here: Prune of an unknown anchor is a noop naming it; Pause needs the
    # UnifiedRadixCache (refused with the reason); an unknown lease is refused naming it
    r = client.post("/hicache/prune", content=json.dumps({"after_block_hash": 1}), headers=H)
    assert r.status_code == 200 and r.json()["type"] == "Prune" and r.json()["missing"] == [1]
    r = client.post("/hicache/pause", content=json.dumps({"block_hashes": [1], "ttl_seconds": 5, "lease_id": "L"}), headers=H)
    assert r.status_code == 400 and "UnifiedRadixCache" in r.json()["reason"]
    r = client.post("/hicache/renew_lease", content=json.dumps(
        {"version": 1, "id": "h-1", "issued_at_ms": 1, "command": {"lease_id": "nope", "new_ttl_seconds": 5}}), headers=H)
    assert r.status_code == 400 and r.json()["reason"].startswith("command.lease_id") and r.json()["id"] == "h-1"
    r = client.post("/hicache/renew_lease", content=json.dumps(
        {"version": 1, "id": "h-1", "issued_at_ms": 1, "command": {"lease_id": "nope", "new_ttl_seconds": 5}}), headers=H)
    assert r.json()["status"] == "duplicate" and r.json()["reason"].startswith("duplicate of h-1; first outcome: rejected (")
    r = client.post("/session/tool_end", content=json.dumps({"session_id": "s", "epoch": 0}), headers=H)
    assert r.status_code == 400 and r.json()["type"] == "ToolEnd"
    r = client.post("/session/kv_meta", content=json.dumps({"session_id": "s"}), headers=H)
    assert r.status_code == 200 and r.json()["type"] == "Inspect" and r.json()["epoch"] is None
    r = client.post("/hicache/command", content=json.dumps({"type": "Inspect"}), headers=H)
    assert r.status_code == 200 and r.json()["status"] == "applied"


def test_malformed_bodies_on_every_route_are_rejections_not_crashes(server):
    from sglang.srt.kvctl.http import ROUTES

    client, _, _ = server
    for path in ROUTES:
        for body in ("{", "[" * 100000, '"x"', "[]", '{"version":1}'):
            r = client.post(path, content=body, headers=H)
            assert r.status_code == 400 and r.json()["status"] == "rejected", (path, body[:10], r.text[:200])


def test_no_route_and_nothing_started_while_kvctl_is_off(monkeypatch):
    import asyncio

    from fastapi import FastAPI

    from sglang.srt.kvctl import lifespan

    monkeypatch.delenv("KVCTL_NATS_URL", raising=False)
    app = FastAPI()
    before = len(app.routes)
    assert asyncio.run(lifespan.start(types.SimpleNamespace(kv_control_config=None, kv_control_nats_url=None), object(), app)) is None
    assert len(app.routes) == before


def test_acks_are_the_contract_bytes_stamped_with_the_worker_id(server):
    from sglang.srt.kvctl.ack import ACK_KEYS, decode_ack, encode_ack

    client, _, _ = server
    r = client.post("/hicache/command", content='{"type":"Inspect","block_hashes":[5]}', headers=H)
    ack = decode_ack(r.content)
    assert list(ack)[: len(ACK_KEYS)] == list(ACK_KEYS) and ack["worker_id"] == "http-w0"
    assert r.content == encode_ack(ack)


def _corpus_rejections():
    from test_conformance import COMMANDS, _body

    return [(c["name"], _body(c), c["field"]) for c in COMMANDS if not c["valid"]]


def _inspect_state(client, hs):
    """Everything a rejected command could have changed, as Inspect reports it."""
    r = client.post("/hicache/command", content=json.dumps({"type": "Inspect", "block_hashes": hs}), headers=H)
    d = r.json()
    counters = d["detail"]["pool"].pop("commands")  # rejections are counted: the one change allowed
    return d["detail"], d["missing"], counters["rejected"]


def test_every_corpus_rejection_over_http_names_the_field_and_changes_nothing(server):
    client, cache, alloc = server
    insert(cache, alloc, list(range(101, 117)))
    hs = stored_hashes(cache)
    before = _inspect_state(client, hs)
    cases = _corpus_rejections()
    for name, body, field in cases:
        r = client.post("/hicache/command", content=body, headers=H)
        assert r.status_code == 400, (name, r.text[:200])
        ack = r.json()
        assert ack["status"] == "rejected" and ack["reason"].startswith(field + ":"), (name, field, ack["reason"][:200])
    after = _inspect_state(client, hs)
    assert after[:2] == before[:2]
    # counted by the scheduler-side layer, except bodies that are not UTF-8: the route refuses
    # those itself, as the NATS subscriber does, before anything is sent to the scheduler
    reached = [c for c in cases if not isinstance(c[1], bytes) or _is_utf8(c[1])]
    assert after[2] == before[2] + len(reached)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
