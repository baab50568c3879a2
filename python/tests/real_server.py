"""pytest fixtures for a real patched SGLang server on CPU (python/kvctl_testbed/server.py, the
one launch recipe; the TypeScript suites use the same through test/helpers/sglang-server.ts).

A suite file imports the fixtures into its namespace and may set its options:

    from real_server import nats, sglang_server  # noqa: F401  (pytest fixtures)
    SGLANG_SERVER_OPTIONS = {"page_size": 16}   # optional: ServerOptions fields

Both fixtures are module scoped: one nats-server and one SGLang server per suite file. The server
runs from the session's patched tree (conftest.py) with the kvctl control subscriber pointed at
the module's nats-server. A server that cannot start fails the test with its command line and
log tail; nothing is skipped.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request

import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from kvctl_testbed.nats_server import NatsServer  # noqa: E402
from kvctl_testbed.server import RealServer, ServerOptions, ServerStartError, start_server  # noqa: E402

__all__ = ["nats", "sglang_server", "start", "generate", "RealServer", "ServerOptions"]


@pytest.fixture(scope="module")
def nats():
    s = NatsServer().start()
    yield s
    s.stop()


def start(patched_tree: str, **options) -> RealServer:
    """Starts one more server (the caller stops it); fails the test if it cannot start."""
    try:
        return start_server(ServerOptions(tree=patched_tree, **options))
    except ServerStartError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def sglang_server(request, nats, patched_tree):
    options = {"nats_url": nats.url, **getattr(request.module, "SGLANG_SERVER_OPTIONS", {})}
    s = start(patched_tree, **options)
    yield s
    s.stop()


def generate(base_url: str, input_ids: list[int] | str, max_new_tokens: int = 4, **extra) -> dict:
    """POST /generate, greedy."""
    body = {("text" if isinstance(input_ids, str) else "input_ids"): input_ids,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}, **extra}
    req = urllib.request.Request(base_url + "/generate", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())
