"""The pytest real-server fixture: a patched SGLang server on CPU starts with the kvctl
subscriber listening and serves greedy requests with prefix hits that SGLang reports."""
from real_server import generate, nats, sglang_server  # noqa: F401  (pytest fixtures)


def test_server_reports_itself_and_serves_prefix_hits(sglang_server):
    assert sglang_server.info.server == "sglang 0.5.23"
    assert "listening on kv-control-w0" in sglang_server.log_text()
    prompt = list(range(200, 240))
    a = generate(sglang_server.base_url, prompt, 6)
    b = generate(sglang_server.base_url, prompt, 6)
    assert b["output_ids"] == a["output_ids"]
    assert b["meta_info"]["cached_tokens"] == 32
    assert b["meta_info"]["cached_tokens_details"]["device"] == 32
