"""One command, one answer: a real patched SGLang server answers the same command with the same
ack bytes over its HTTP front door (POST /hicache/command) and over NATS (kv-control-{worker_id}).

Each command is sent twice, once per front door, to a state that is the same both times (the
stateful ones are undone in between: pin -> unpin). Only two fields may differ and they are
blanked before the byte comparison: ``id`` (each send carries its own, or the second would be
answered as a duplicate of the first) and ``elapsed_us`` (a duration). Rejections come from
different code on the two sides (the NATS subscriber refuses a malformed body itself, the HTTP
route passes it to the scheduler's codec), which is why they are compared too."""
import asyncio
import http.client
import json
import re
import time
from urllib.parse import urlsplit

from real_server import generate, nats, sglang_server  # noqa: F401  (pytest fixtures)

SGLANG_SERVER_OPTIONS = {"page_size": 16}
VOLATILE = re.compile(rb'("id":)(?:"[^"]*"|null)|("elapsed_us":)\d+')


def blank(ack: bytes) -> bytes:
    return VOLATILE.sub(lambda m: (m.group(1) or m.group(2)) + b"_", ack)


def over_http(server, body: bytes) -> bytes:
    u = urlsplit(server.base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request("POST", "/hicache/command", body=body, headers={"content-type": "application/json"})
        return conn.getresponse().read()
    finally:
        conn.close()


async def over_nats(url: str, subject: str, bodies: list[bytes]) -> list[bytes]:
    import nats as nats_py

    nc = await nats_py.connect(servers=[url])
    try:
        return [(await nc.request(subject, b, timeout=120)).data for b in bodies]
    finally:
        await nc.close()


def envelope(tag: str, command: dict) -> bytes:
    return json.dumps({"version": 1, "id": f"{tag}-{time.monotonic_ns()}", "issued_at_ms": int(time.time() * 1000),
                       "command": command}).encode()


def test_http_and_nats_answer_one_command_with_the_same_bytes(sglang_server, nats):
    generate(sglang_server.base_url, list(range(300, 348)), 2)  # three full pages of 16
    listed = json.loads(over_http(sglang_server, envelope("list", {"type": "Inspect"})))
    held = [b["block_hash"] for b in listed["detail"]["blocks"]]
    assert len(held) >= 3, listed
    absent = 4242424242424242
    commands = [
        ("pin", {"type": "Cache", "block_hashes": held[:3], "pin": True, "ttl_seconds": 600}),
        ("unpin", {"type": "Cache", "block_hashes": held[:3], "pin": False}),
        ("pin-absent", {"type": "Cache", "block_hashes": [absent], "pin": True}),
        ("prune-absent", {"type": "Prune", "after_block_hash": absent}),
        ("think-absent", {"type": "Think", "block_hashes": [absent], "transient": False}),
        ("renew-unknown", {"type": "RenewLease", "lease_id": "never-issued", "new_ttl_seconds": 5}),
        ("toolend-unknown", {"type": "ToolEnd", "session_id": "never-started", "epoch": 1}),
        ("hash-out-of-int64", {"type": "Cache", "block_hashes": [9223372036854775808], "pin": True}),
        ("missing-field", {"type": "Prune"}),
        ("unknown-field", {"type": "Inspect", "colour": "blue"}),
    ]
    raw_bodies = [("not-json", b"{not json"), ("unknown-type", b'{"type":"Evict","block_hashes":[1]}')]
    via_http, via_nats = [], []
    subject = f"kv-control-{sglang_server.info.worker_id}"
    for tag, cmd in commands:
        via_http.append(over_http(sglang_server, envelope(tag, cmd)))
        via_nats.append(asyncio.run(over_nats(nats.url, subject, [envelope(tag, cmd)]))[0])
    for _tag, body in raw_bodies:
        via_http.append(over_http(sglang_server, body))
        via_nats.append(asyncio.run(over_nats(nats.url, subject, [body]))[0])

    tags = [t for t, _ in commands] + [t for t, _ in raw_bodies]
    statuses = {t: json.loads(a)["status"] for t, a in zip(tags, via_http)}
    # the commands did what they say, so the comparison is between real outcomes
    assert statuses["pin"] == "applied" and statuses["unpin"] == "applied", statuses
    assert statuses["pin-absent"] == "noop" and statuses["prune-absent"] == "noop", statuses
    for t in ("renew-unknown", "toolend-unknown", "hash-out-of-int64", "missing-field", "unknown-field",
              "not-json", "unknown-type"):
        assert statuses[t] == "rejected", (t, statuses[t])
    assert json.loads(via_http[tags.index("hash-out-of-int64")])["reason"].startswith("command.block_hashes[0]")
    for t, h, n in zip(tags, via_http, via_nats):
        assert blank(h) == blank(n), f"{t}:\n http {h!r}\n nats {n!r}"
