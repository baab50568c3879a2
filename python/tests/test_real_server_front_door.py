"""The HTTP front door of a real patched SGLang server under attack. The server runs with both an
API key and an admin API key: every kvctl route (as the server itself lists them) refuses requests
without the admin key (no key, the plain API key, a wrong key, a non-bearer scheme) before the
body reaches the worker, and with the key answers garbage (the NATS probe's list: empty, invalid
UTF-8, 100000-deep nesting, 1e400, NaN, a 1000000-digit integer, 70000 hashes, reused ids) and
oversized bodies with a 400 rejection naming the field. A client thread keeps generating all the
while; every one of its requests must succeed."""
import http.client
import json
import os
import re
import threading
import time
from urllib.parse import urlsplit

from real_server import nats, sglang_server  # noqa: F401  (pytest fixtures)

RUN = f"{os.getpid()}-{int(time.time())}"


def now_ms() -> int:
    return int(time.time() * 1000)
API_KEY = "front-door-api-key"
ADMIN_KEY = "front-door-admin-key"
# "<field>: <why>", the field as docs/protocol.md paths name it (command.block_hashes[3], body, ...).
NAMES_FIELD = re.compile(r"^([A-Za-z_][\w.\[\]]*): \S")
SGLANG_SERVER_OPTIONS = {"extra_args": ["--api-key", API_KEY, "--admin-api-key", ADMIN_KEY]}


def request(base_url: str, method: str, path: str, body: bytes | None = None, auth: str | None = None,
            timeout: float = 120) -> tuple[int, bytes]:
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    headers = {"content-type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def post(server, path: str, body: bytes, auth: str | None = f"Bearer {ADMIN_KEY}") -> tuple[int, dict | bytes]:
    status, raw = request(server.base_url, "POST", path, body, auth)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def generate(server, prompt: list[int]) -> dict:
    body = json.dumps({"input_ids": prompt, "sampling_params": {"max_new_tokens": 2, "temperature": 0, "ignore_eos": True}})
    status, raw = request(server.base_url, "POST", "/generate", body.encode(), f"Bearer {API_KEY}")
    assert status == 200, raw[:300]
    return json.loads(raw)


def served_paths(server) -> set[str]:
    status, raw = request(server.base_url, "GET", "/openapi.json", auth=f"Bearer {API_KEY}")
    assert status == 200, raw[:300]
    return set(json.loads(raw)["paths"])


def kvctl_routes(server) -> list[str]:
    """kvctl's routes, each checked to be served by this server."""
    from sglang.srt.kvctl.http import ROUTES

    served = served_paths(server)
    missing = [p for p in ROUTES if p not in served]
    assert not missing, f"kvctl routes the server does not serve: {missing}"
    return sorted(ROUTES)


class Generator:
    """Generates in a loop on its own thread until stopped; counts successes, keeps failures."""

    def __init__(self, server):
        self.server = server
        self.ok = 0
        self.failures: list[str] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self._stop.is_set():
            i += 1
            try:
                out = generate(self.server, [300 + (i % 50), 301, 302, 303])
                assert len(out["output_ids"]) == 2
                with self._changed:
                    self.ok += 1
                    self._changed.notify_all()
            except Exception as e:  # noqa: BLE001 (recorded and asserted on)
                with self._changed:
                    self.failures.append(f"{type(e).__name__}: {e}")
                    self._changed.notify_all()

    def wait_ok(self, n: int, timeout_s: float) -> None:
        """Until n generations succeeded, one failed, or the deadline passed."""
        with self._changed:
            self._changed.wait_for(lambda: self.ok >= n or self.failures, timeout_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        self._thread.join(timeout=180)


def test_the_server_serves_every_kvctl_route(sglang_server):
    routes = kvctl_routes(sglang_server)
    assert "/hicache/pin_blocks" in routes and "/session/kv_meta" in routes


def test_every_kvctl_route_refuses_requests_without_the_admin_key(sglang_server):
    routes = kvctl_routes(sglang_server)
    assert len(routes) >= 10
    for path in routes:
        body = json.dumps({"version": 1, "issued_at_ms": now_ms(), "id": f"noauth-{RUN}-{path.strip('/').replace('/', '-')}",
                           "command": {"type": "Inspect"}}).encode()
        for auth in (None, f"Bearer {API_KEY}", "Bearer wrong-key", f"Basic {ADMIN_KEY}", f"Bearer {ADMIN_KEY}x", "Bearer"):
            status, _ = post(sglang_server, path, body, auth)
            assert status == 401, (path, auth, status)
        # A huge body without the key is refused just the same.
        status, _ = post(sglang_server, path, b"[" * (4 << 20), None)
        assert status == 401, (path, status)
    # None of them reached the worker: the same ids are fresh when sent with the key.
    status, ack = post(sglang_server, "/hicache/command",
                       json.dumps({"version": 1, "issued_at_ms": now_ms(), "id": f"noauth-{RUN}-hicache-command", "command": {"type": "Inspect"}}).encode())
    assert status == 200 and ack["status"] == "applied" and ack["id"] == f"noauth-{RUN}-hicache-command", ack
    # Generation still needs the plain API key (the admin key is not it) and works with it.
    status, _ = request(sglang_server.base_url, "POST", "/generate", b'{"input_ids":[1,2],"sampling_params":{"max_new_tokens":1}}')
    assert status == 401
    assert len(generate(sglang_server, [5, 6, 7])["output_ids"]) == 2


def garbage() -> list[tuple[str, bytes, str]]:
    """(name, body, the field /hicache/command's rejection names): the NATS probe's list, as HTTP
    bodies. The other routes fill in their own type, so they may name another field first."""
    deep = 100_000
    return [
        # Empty on the generic route only: the typed routes read an empty body as {} (Inspect: all).
        ("empty", b"", "body"),
        # Bytes that are not UTF-8 are refused as a body, before any field is read (never repaired).
        ("invalid UTF-8", b'{"type":"Inspect","session_id":"s\xff\xfe"}', "body"),
        ("invalid UTF-8 (bare)", b"\xff\xfe\xfd", "body"),
        ("100000-deep nesting", b'{"type":"Inspect","block_hashes":' + b"[" * deep + b"]" * deep + b"}", "body"),
        ("1e400", b'{"type":"Cache","block_hashes":[1],"pin":true,"ttl_seconds":1e400}', "ttl_seconds"),
        # NaN is not JSON (both codecs refuse it as a body, as JSON.parse does).
        ("NaN", b'{"type":"Cache","block_hashes":[1],"pin":true,"ttl_seconds":NaN}', "body"),
        # A huge literal is kept as text by the reader, then refused as out of int64 where it stands.
        ("1000000-digit integer", b'{"type":"Inspect","block_hashes":[1' + b"0" * 999_999 + b"]}", "block_hashes[0]"),
        ("70000 hashes", json.dumps({"type": "Inspect", "block_hashes": list(range(1, 70_001))}).encode(), "block_hashes"),
        ("oversized (4 MiB of hashes)", b'{"type":"Inspect","block_hashes":[' + b"1," * (2 << 20) + b"1]}", "block_hashes"),
        ("not an object", b'"x"', "body"),
        ("unterminated", b"{", "body"),
        ("unknown version", b'{"version":99,"command":{"type":"Inspect"}}', "version"),
    ]


def test_garbage_on_every_route_is_rejected_naming_the_field_while_generation_goes_on(sglang_server):
    routes = kvctl_routes(sglang_server)
    with Generator(sglang_server) as gen:
        for name, body, field in garbage():
            for path in (["/hicache/command"] if name == "empty" else routes):
                status, ack = post(sglang_server, path, body)
                assert status == 400 and isinstance(ack, dict) and ack["status"] == "rejected", (name, path, status, str(ack)[:300])
                named = NAMES_FIELD.match(ack["reason"])
                assert named, (name, path, ack["reason"][:300])
                if path == "/hicache/command":
                    assert named.group(1) == field, (name, ack["reason"][:300])
        # Reused ids: the second command with an id is a duplicate, never applied a second time.
        first = json.dumps({"version": 1, "issued_at_ms": now_ms(), "id": f"reused-{RUN}", "command": {"type": "Inspect"}}).encode()
        other = json.dumps({"version": 1, "issued_at_ms": now_ms(), "id": f"reused-{RUN}", "command": {"type": "Cache", "block_hashes": [7], "pin": True,
                                                                         "ttl_seconds": 30}}).encode()
        status, ack = post(sglang_server, "/hicache/command", first)
        assert status == 200 and ack["status"] == "applied", ack
        for path in ("/hicache/command", "/hicache/cache", "/hicache/inspect"):
            status, ack = post(sglang_server, path, other)
            assert ack["status"] == "duplicate" and ack["id"] == f"reused-{RUN}", (path, ack)
        gen.wait_ok(3, 120)
    print(f"generation during the barrage: {gen.ok} requests ok, {len(gen.failures)} failed")
    assert gen.failures == [], gen.failures[:5]
    assert gen.ok >= 3
    # And the worker still answers commands normally afterwards.
    status, ack = post(sglang_server, "/hicache/inspect", json.dumps({"block_hashes": [1, 2]}).encode())
    assert status == 200 and ack["status"] in ("applied", "partial", "noop"), ack
    assert sglang_server.alive()
