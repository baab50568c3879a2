"""The test bed's loopback ports come from the ephemeral range, where any outgoing connection can
take one between free_port() and the server's bind: nats-server's first start moves to another
port then, and a restart keeps its own (clients reconnect to the same URL)."""
import socket

import pytest
from kvctl_testbed import nats_server as testbed_nats


@pytest.fixture
def held_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_nats_first_start_moves_off_a_port_taken_meanwhile(held_port, monkeypatch):
    picks = iter([held_port])
    real = testbed_nats.free_port
    monkeypatch.setattr(testbed_nats, "free_port", lambda: next(picks, None) or real())
    n = testbed_nats.NatsServer()
    assert n.port == held_port
    n.start()
    try:
        assert n.port != held_port and n.url == f"nats://127.0.0.1:{n.port}"
        with socket.create_connection(("127.0.0.1", n.port), timeout=5) as c:
            assert c.recv(4) == b"INFO"
        port = n.port
        n.restart()
        assert n.port == port
    finally:
        n.stop()


def test_nats_on_a_port_the_caller_gave_does_not_move(held_port):
    with pytest.raises(RuntimeError, match="did not become ready"):
        testbed_nats.NatsServer(port=held_port).start()
