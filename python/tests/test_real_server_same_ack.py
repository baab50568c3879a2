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

# No admin key on this server: its kvctl HTTP routes are served only with --kvctl-http-open.
SGLANG_SERVER_OPTIONS = {"page_size": 16, "extra_args": ["--kvctl-http-open"]}
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
        ("prefetch-absent", {"type": "Prefetch", "block_hashes": [absent], "deadline_ms": 5000}),
        ("prefetch-bad-deadline", {"type": "Prefetch", "block_hashes": held[:1], "deadline_ms": 0}),
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
    for t in ("renew-unknown", "toolend-unknown", "prefetch-absent", "prefetch-bad-deadline", "hash-out-of-int64",
              "missing-field", "unknown-field", "not-json", "unknown-type"):
        assert statuses[t] == "rejected", (t, statuses[t])
    assert json.loads(via_http[tags.index("hash-out-of-int64")])["reason"].startswith("command.block_hashes[0]")
    assert json.loads(via_http[tags.index("prefetch-absent")])["reason"].startswith("command.block_hashes[0]: block")
    assert json.loads(via_http[tags.index("prefetch-bad-deadline")])["reason"].startswith("command.deadline_ms")
    for t, h, n in zip(tags, via_http, via_nats):
        assert blank(h) == blank(n), f"{t}:\n http {h!r}\n nats {n!r}"


def _corpus_rejections() -> list[tuple[str, bytes, str]]:
    import base64
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "protocol", "commands.json")
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    out = []
    for c in cases:
        if c["valid"]:
            continue
        if "body_base64" in c:
            body = base64.b64decode(c["body_base64"])
        else:
            text = c["body"]
            for marker, item, count, sep in c.get("repeat") or []:
                text = text.replace(marker, sep.join([item] * count))
            body = text.encode()
        out.append((c["name"], body, c["field"]))
    return out


def _state(server) -> bytes:
    """Inspect's answer with what a rejection may change blanked: the command counters (a
    rejection is counted), the ack's id and elapsed_us."""
    ack = json.loads(over_http(server, envelope("state", {"type": "Inspect"})))
    ack["detail"]["pool"].pop("commands")
    ack["id"] = ack["elapsed_us"] = None
    return json.dumps(ack, sort_keys=True).encode()


async def _nats_rejections(url: str, subject: str, bodies: list[bytes]) -> tuple[list, int]:
    import nats as nats_py

    nc = await nats_py.connect(servers=[url])
    try:
        out = []
        for b in bodies:
            # a body over the server's max_payload never leaves the client: NATS refuses it
            out.append(None if len(b) > nc.max_payload else (await nc.request(subject, b, timeout=120)).data)
        return out, nc.max_payload
    finally:
        await nc.close()


def test_every_corpus_rejection_names_its_field_on_both_front_doors_and_changes_nothing(sglang_server, nats):
    generate(sglang_server.base_url, list(range(400, 448)), 2)
    first = json.loads(over_http(sglang_server, envelope("list", {"type": "Inspect"})))["detail"]["blocks"][0]
    pinned = json.loads(over_http(sglang_server, envelope("pin", {"type": "Cache", "block_hashes": [first["block_hash"]],
                                                                  "pin": True})))
    assert pinned["status"] == "applied", pinned
    before = _state(sglang_server)
    assert b'"pin_count": 1' in before, before  # a state with a pin in it: "unchanged" means something
    cases = _corpus_rejections()
    assert len(cases) > 100
    subject = f"kv-control-{sglang_server.info.worker_id}"
    via_nats, max_payload = asyncio.run(_nats_rejections(nats.url, subject, [b for _, b, _ in cases]))
    unsent = []
    for (name, body, field), n in zip(cases, via_nats):
        h = over_http(sglang_server, body)
        ack = json.loads(h)
        assert ack["status"] == "rejected", (name, ack)
        assert ack["reason"].startswith(field + ": "), (name, field, ack["reason"])
        if n is None:
            unsent.append(name)
        else:
            assert blank(h) == blank(n), f"{name}:\n http {h!r}\n nats {n!r}"
    assert all(len(b) > max_payload for name, b, _ in cases if name in unsent)
    assert len(unsent) <= 2, unsent  # only the multi-megabyte bodies exceed NATS's payload limit
    assert _state(sglang_server) == before


def test_commands_sent_together_get_the_acks_they_get_one_by_one(sglang_server, nats):
    """Commands that queue up behind a busy scheduler travel to it together and are applied in
    order: each ack is byte for byte the one the command gets alone (id and elapsed_us blanked)."""
    generate(sglang_server.base_url, list(range(500, 548)), 2)
    listed = json.loads(over_http(sglang_server, envelope("list", {"type": "Inspect"})))
    held = [b["block_hash"] for b in listed["detail"]["blocks"]][:3]
    absent = 4343434343434343
    commands = [
        ("pin", {"type": "Cache", "block_hashes": held, "pin": True, "ttl_seconds": 600}),
        ("unpin", {"type": "Cache", "block_hashes": held, "pin": False}),
        ("pin-absent", {"type": "Cache", "block_hashes": [absent], "pin": True}),
        ("prune-absent", {"type": "Prune", "after_block_hash": absent}),
        ("renew-unknown", {"type": "RenewLease", "lease_id": "never-issued", "new_ttl_seconds": 5}),
        ("missing-field", {"type": "Prune"}),
    ] * 6
    subject = f"kv-control-{sglang_server.info.worker_id}"
    alone = [blank(asyncio.run(over_nats(nats.url, subject, [envelope(t, c)]))[0]) for t, c in commands]

    async def together() -> list[bytes]:
        import nats as nats_py

        nc = await nats_py.connect(servers=[nats.url])
        try:
            pending = [nc.request(subject, envelope(t, c), timeout=120) for t, c in commands]
            return [blank(m.data) for m in await asyncio.gather(*pending)]
        finally:
            await nc.close()

    assert asyncio.run(together()) == alone
    assert "commands queued behind a busy scheduler go in one trip" in sglang_server.log_text()
