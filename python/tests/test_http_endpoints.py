"""/hicache/* endpoints through SGLang's real FastAPI app (http_server imports on CPU): route ->
kvctl tokenizer function -> communicator (stand-in: calls the scheduler handler in-process, as the
FanOutCommunicator would over ZMQ) -> scheduler dispatcher entry -> tree cache."""
import json
import types

import pytest
from helpers import insert, make_radix, stored_hashes

from sglang.srt.kvctl.io import KvctlCommandReqInput, KvctlCommandReqOutput
from sglang.srt.kvctl.scheduler_side import scheduler_command
from sglang.srt.managers.io_struct import _msgpack_decoder, _msgpack_encoder


class _CommunicatorStandIn:
    def __init__(self, schedulers):
        self.schedulers = schedulers

    async def __call__(self, req):
        # round-trip through SGLang's IPC codec, as the ZMQ hop does
        req = _msgpack_decoder.decode(_msgpack_encoder.encode(req))
        outs = [scheduler_command(s, req) for s in self.schedulers]
        return [_msgpack_decoder.decode(_msgpack_encoder.encode(o)) for o in outs]


@pytest.fixture(scope="module")
def server():
    from fastapi.testclient import TestClient

    import sglang.srt.entrypoints.http_server as hs
    from sglang.srt.utils.auth import add_api_key_middleware

    cache, alloc = make_radix()
    sched = types.SimpleNamespace(tree_cache=cache, waiting_queue=[])
    tm = types.SimpleNamespace(auto_create_handle_loop=lambda: None,
                               kvctl_command_communicator=_CommunicatorStandIn([sched]))
    hs._global_state = types.SimpleNamespace(tokenizer_manager=tm)
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


def test_pin_unpin_inspect_round_trip_with_int64_literals(server):
    client, cache, alloc = server
    insert(cache, alloc, list(range(1, 9)))
    hs = stored_hashes(cache)
    body = '{"version":1,"id":"r1","command":{"block_hashes":[%s,%s,-9223372036854775808]}}' % tuple(hs)
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
