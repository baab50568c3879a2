"""Starts a real, patched SGLang 0.5.23 server on CPU: the one launch recipe of the test bed.

`python -m sglang.launch_server` from a patched copy of the venv's SGLang (`kvctl patch apply`),
the tiny local model (tiny_model.py), HiCache (host ratio 2, direct io, layer-first host pool),
the `file` storage backend as L3, KV events on an explicit loopback endpoint, and the kvctl
control flags when a NATS URL is given. The CPU stand-ins (python/tests/stand_ins) are loaded
into every server process by their sitecustomize.py, switched on by KVCTL_CPU_STAND_INS=server
in the environment set here.

Ready means `/health` answers 200 and, with a NATS URL, the subscriber logged "listening". A
server that fails to start raises ServerStartError with the command line and the last 30 lines
of its log.

Used in process by the pytest fixture (python/tests/real_server.py) and, through
`python -m kvctl_testbed serve` (one JSON line on stdout when ready, stops when stdin closes),
by the TypeScript fixture (test/helpers/sglang-server.ts) and `kvctl demo`.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

from . import tiny_model

REPO = tiny_model.REPO
STAND_INS = os.path.join(REPO, "python", "tests", "stand_ins")
SGLANG_VERSION = "0.5.23"
LISTENING = "kvctl subscriber: worker "  # + "<id> listening on ..." (sglang.srt.kvctl.subscriber)


class ServerStartError(RuntimeError):
    pass


PORT_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerOptions:
    tree: str | None = None  # patched SGLang tree (dir holding `sglang/`); built when None
    model: str | None = None  # model dir; the tiny model when None
    nats_url: str | None = None  # kvctl control subscriber off when None
    worker_id: str = "w0"
    # the commands kvctl accepts (--kv-control-config commands): a list, or "rust" for those
    # SGLang's Rust tree core carries (kvctl_worker/cores.py: SGLang then keeps that core); None:
    # every command (Think makes SGLang pick its Python tree core)
    kvctl_commands: list[str] | str | None = None
    page_size: int = 16
    max_total_tokens: int = 2048
    host_ratio: float = 2.0
    hicache: bool = True  # HiCache host tier (and L3 when storage_dir); False = device pool only
    storage_dir: str | None = None  # `file` L3 backend dir; a temp dir when None; "" = no L3
    kv_events: bool = True
    # fixed ports (a worker restarted where its router knows it); free ones when None
    port: int | None = None
    events_port: int | None = None
    warmup: bool = True
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None  # server stdout+stderr; a temp file (removed on stop) when None
    ready_timeout_s: float = 480.0
    # coverage.py rcfile for every server process (COVERAGE_PROCESS_START; coverage's .pth starts
    # it); inherited from the environment when None
    coverage_rcfile: str | None = None


@dataclass
class ServerInfo:
    base_url: str
    port: int
    pid: int
    worker_id: str
    nats_url: str | None
    events_endpoint: str | None
    model: str
    tree: str
    storage_dir: str | None
    page_size: int
    max_total_tokens: int
    log_path: str
    command: list[str]
    start_s: float
    server: str = f"sglang {SGLANG_VERSION}"
    model_note: str = tiny_model.MODEL_NOTE
    tree_core: str | None = None  # "rust" | "python": the tree core kvctl said it runs on


def _build_tree() -> str:
    sys.path.insert(0, os.path.join(REPO, "python", "tests"))
    import sglang_tree  # python/tests/sglang_tree.py: the one recipe for the patched copy

    return sglang_tree.build_patched_tree()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"


class RealServer:
    """A running server; `stop()` ends its whole process group."""

    def __init__(self, info: ServerInfo, proc: subprocess.Popen, owned: list[str], coverage_rc: str | None = None):
        self.info = info
        self.proc = proc
        self._owned = owned
        self._coverage_rc = coverage_rc

    def _save_coverage(self, pids: list[int], timeout_s: float) -> None:
        """Under coverage.py: SIGUSR2 to every server process (stand_ins/sitecustomize.py saves
        its data and writes saved-<pid>), then wait for the markers."""
        import configparser

        cp = configparser.ConfigParser()
        cp.read(self._coverage_rc)
        data_dir = os.path.dirname(os.path.abspath(cp.get("run", "data_file", fallback=".coverage")))
        waiting = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGUSR2)
                waiting.append(pid)
            except ProcessLookupError:
                pass
        markers = [os.path.join(data_dir, f"saved-{p}") for p in waiting]
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            waiting = [p for p in waiting if not os.path.exists(os.path.join(data_dir, f"saved-{p}"))
                       and _running(p)]
            time.sleep(0.05)
        for m in markers:  # pids are reused: a later server must not find a stale marker
            if os.path.exists(m):
                os.remove(m)

    @property
    def base_url(self) -> str:
        return self.info.base_url

    def log_tail(self, n: int = 30) -> str:
        return _tail(self.info.log_path, n)

    def log_text(self) -> str:
        with open(self.info.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM to the launcher, then to what is left of its group, waiting for every process
        of it; then SIGKILL. Under coverage.py every process saves its data first (SIGUSR2)."""
        import psutil

        if self.proc.poll() is None:
            try:
                children = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.Error:
                children = []
            if self._coverage_rc:
                self._save_coverage([self.proc.pid, *(c.pid for c in children)], timeout_s)
            t0 = time.monotonic()
            # the launcher first: it shuts down gracefully (lifespan shutdown, the subscriber's
            # stop) and ends its own children; then whatever is left of the group
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            psutil.wait_procs(children, timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for d in self._owned:
            subprocess.run(["rm", "-rf", d], check=False)
        self._owned = []
        return self.proc.returncode

    def __enter__(self) -> "RealServer":
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


def command_line(o: ServerOptions, model: str, port: int, events_endpoint: str | None) -> list[str]:
    cmd = [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", model, "--device", "cpu", "--attention-backend", "torch_native",
        "--max-total-tokens", str(o.max_total_tokens), "--mem-fraction-static", "0.3",
        "--host", "127.0.0.1", "--port", str(port), "--page-size", str(o.page_size),
        # idle schedulers poll their sockets (waking at least once a second, so the kvctl tick
        # still runs) instead of spinning a core each: several servers share 2 CI cores
        "--sleep-on-idle",
    ]
    if o.hicache:
        cmd += ["--enable-hierarchical-cache", "--hicache-ratio", str(o.host_ratio),
                "--hicache-io-backend", "direct", "--hicache-mem-layout", "layer_first"]
    if o.hicache and o.storage_dir:
        cmd += ["--hicache-storage-backend", "file"]
    if events_endpoint:
        cmd += ["--kv-events-config", json.dumps({"publisher": "zmq", "endpoint": events_endpoint, "bind": True})]
    if o.nats_url:
        cmd += ["--kv-control-nats-url", o.nats_url, "--kv-control-worker-id", o.worker_id]
    if o.kvctl_commands is not None:
        cmd += ["--kv-control-config", json.dumps({"commands": accepted_commands(o.kvctl_commands)})]
    if not o.warmup:
        cmd += ["--skip-server-warmup"]
    return cmd + list(o.extra_args)


def accepted_commands(spec: list[str] | str) -> list[str]:
    """``spec`` as --kv-control-config commands: "rust" = every command SGLang's Rust tree core
    carries (kvctl_worker/cores.py is the one list of those it does not)."""
    if spec != "rust":
        return list(spec)
    from kvctl_worker import cores, wire_tables

    return [c for c in wire_tables.KNOWN_TYPES if c not in cores.PYTHON_ONLY]


def tree_core_of(log_text: str) -> str | None:
    """The tree core kvctl logged it runs on (its observer says so when the cache is built)."""
    for core in ("rust", "python"):
        if f"kvctl: on SGLang's {core.capitalize()} tree core" in log_text:
            return core
    return None


def _health(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _port_taken(log_text: str) -> bool:
    """EADDRINUSE as ZMQ spells it (the events port: the launch dies) or as asyncio spells it for
    uvicorn ("... address already in use", lower case: the HTTP port)."""
    return "address already in use" in log_text.lower()


def _log_since(path: str, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def start_server(o: ServerOptions | None = None, **kw) -> RealServer:
    o = o or ServerOptions(**kw)
    t0 = time.monotonic()
    owned: list[str] = []
    tree = o.tree
    if tree is None:
        tree = _build_tree()
        owned.append(tree)
    model = o.model or tiny_model.ensure_model()
    storage = o.storage_dir if o.hicache else ""
    if storage is None:
        storage = tempfile.mkdtemp(prefix="kvctl-l3-")
        owned.append(storage)
    o.storage_dir = storage or None
    log_path = o.log_path
    if not log_path:
        fd, log_path = tempfile.mkstemp(prefix=f"kvctl-sglang-{o.worker_id}-", suffix=".log")
        os.close(fd)
        if not os.environ.get("KVCTL_KEEP_SERVER_LOGS"):
            owned.append(log_path)
    env = dict(os.environ)
    env.update({
        "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "KVCTL_CPU_STAND_INS": "server",
        "PYTHONPATH": os.pathsep.join(p for p in [STAND_INS, tree, env.get("PYTHONPATH", "")] if p),
        "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false",
        # one intra-op thread: the tiny model gains nothing from more, and OpenMP workers that
        # spin-wait starve the other servers and tests sharing the cores
        "OMP_NUM_THREADS": "1",
    })
    if o.storage_dir:
        env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = o.storage_dir
    if o.coverage_rcfile:
        env["COVERAGE_PROCESS_START"] = o.coverage_rcfile
    env.update(o.env)
    deadline = t0 + o.ready_timeout_s
    # The ports were free when chosen, but they come from the ephemeral range, where any process's
    # outgoing connection may take one before the server binds it: a launch that dies of
    # EADDRINUSE is tried again on new ports, a few times.
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = o.port or free_port()
        events = f"tcp://127.0.0.1:{o.events_port or free_port()}" if o.kv_events else None
        cmd = command_line(o, model, port, events)
        log_start = os.path.getsize(log_path)
        log = open(log_path, "ab")
        proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        base = f"http://127.0.0.1:{port}"
        info = ServerInfo(base_url=base, port=port, pid=proc.pid, worker_id=o.worker_id, nats_url=o.nats_url,
                          events_endpoint=events, model=model, tree=tree, storage_dir=o.storage_dir,
                          page_size=o.page_size, max_total_tokens=o.max_total_tokens, log_path=log_path,
                          command=cmd, start_s=0.0)
        # Owns nothing until it is ready: a retry reuses the tree, storage and log.
        server = RealServer(info, proc, [], env.get("COVERAGE_PROCESS_START"))
        healthy = False
        taken = False
        while True:
            if proc.poll() is not None:
                why = f"exited with status {proc.returncode} before it was ready"
                taken = _port_taken(_log_since(log_path, log_start))
                break
            log_text = _log_since(log_path, log_start)
            if _port_taken(log_text):
                # uvicorn's failed bind leaves the process up until SGLang's warmup thread gives
                # up on the HTTP port minutes later: no reason to wait for that
                why = "could not bind a port (address already in use)"
                taken = True
                break
            if not healthy:
                healthy = _health(base)
            if healthy and (not o.nats_url or f"{LISTENING}{o.worker_id} listening" in log_text):
                info.start_s = round(time.monotonic() - t0, 1)
                info.tree_core = tree_core_of(log_text)
                server._owned = owned
                return server
            if time.monotonic() > deadline:
                why = f"not ready within {o.ready_timeout_s:.0f} s (health {'ok' if healthy else 'not ok'}" + (
                    ", no subscriber 'listening' line)" if o.nats_url else ")")
                break
            time.sleep(0.5)
        server.stop()
        if not (taken and attempt < PORT_ATTEMPTS):
            break
    tail = server.log_tail(30)
    server._owned = owned
    server.stop()
    raise ServerStartError(f"SGLang server {why}\ncommand: {shlex.join(cmd)}\nlog ({log_path}), last 30 lines:\n{tail}")


def info_json(s: RealServer) -> str:
    return json.dumps({"sglang_server": "ready", **asdict(s.info)})
