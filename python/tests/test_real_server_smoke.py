"""The pytest real-server fixture: a patched SGLang server on CPU starts with the kvctl
subscriber listening and serves greedy requests with prefix hits that SGLang reports."""
import pytest
from real_server import generate, nats, sglang_server, start  # noqa: F401  (pytest fixtures)


def test_server_reports_itself_and_serves_prefix_hits(sglang_server):
    assert sglang_server.info.server == "sglang 0.5.23"
    assert "listening on kv-control-w0" in sglang_server.log_text()
    prompt = list(range(200, 240))
    a = generate(sglang_server.base_url, prompt, 6)
    b = generate(sglang_server.base_url, prompt, 6)
    assert b["output_ids"] == a["output_ids"]
    assert b["meta_info"]["cached_tokens"] == 32
    assert b["meta_info"]["cached_tokens_details"]["device"] == 32


@pytest.mark.parametrize("which", ["http", "events"])
def test_a_launch_whose_port_was_taken_meanwhile_is_retried_on_new_ports(patched_tree, monkeypatch, which):
    # Ports come from the ephemeral range, where any outgoing connection can take one between
    # free_port() and the server's bind: here one port is held by a listener from the start. The
    # events socket (ZMQ) kills the launch; the HTTP one (uvicorn) leaves it up, waiting to die.
    import socket

    from kvctl_testbed import server as testbed

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    picks = iter([taken] if which == "http" else [testbed.free_port(), taken])
    real_free_port = testbed.free_port
    monkeypatch.setattr(testbed, "free_port", lambda: next(picks, None) or real_free_port())
    s = start(patched_tree)
    try:
        assert s.info.port != taken
        assert s.info.events_endpoint and not s.info.events_endpoint.endswith(f":{taken}")
        assert "address already in use" in s.log_text().lower()  # the first launch did meet it
        # the retry follows the failed bind, not SGLang's warmup giving up on the port minutes later
        assert "Initialization failed" not in s.log_text()
        a = generate(s.base_url, list(range(300, 340)), 2)
        assert len(a["output_ids"]) == 2
    finally:
        s.stop()
        held.close()
