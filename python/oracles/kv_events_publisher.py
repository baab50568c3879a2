"""SGLang's own KV-event publisher, driven from the kvctl tests.

What runs, verbatim from the pinned release (sglang/srt/disaggregation/kv_events.py):
  EventBatch / KVEventBatch / BlockStored / BlockRemoved / AllBlocksCleared (the msgspec structs
  that define the wire) and ZmqEventPublisher (PUB socket, seq counter, replay ROUTER, replay
  buffer, publisher thread). The module file is loaded on its own, without `sglang/__init__.py`
  (which pulls in the whole serving stack); of its imports only two that the publisher never
  calls are stubbed when they cannot be imported on a CPU-only venv: `get_parallel`
  (runtime_context; used by is_kv_publisher_rank) and, if pydantic is missing, `BaseModel`
  (KVEventsConfig only). `NetworkAddress` is imported for real when psutil is present.

Modes:
  serve --endpoint tcp://127.0.0.1:PORT [--replay tcp://127.0.0.1:PORT] [--topic T]
      Prints `READY` and then reads one JSON command a line from stdin:
        {"op": "publish", "events": [EVENT...], "ts": float?}  -> prints `SENT <seq>` once sent
        {"op": "drop"}      the next publish is numbered and kept for replay but not sent (a gap)
        {"op": "restart"}   a new ZmqEventPublisher on the same endpoints (seq starts at 0 again)
        {"op": "wait_subscribers", "count": 1, "timeout_s": 60}
                            -> `OK <n>` once n >= count subscriptions reached the publisher
                               (from then on the subscribers get every batch), else `ERR ...`
        {"op": "quit"}
      EVENT: {"type": "BlockStored", "tokens": [...], "page": 64, "parent": int|null,
              "hashes": [int...]? (default: computed from tokens, chained from the parent's digest
              if this process published the parent), "medium": "GPU", "cache_salt": str?, ...}
             {"type": "BlockRemoved", "hashes": [...], "medium": "GPU"} | {"type": "AllBlocksCleared"}
  decode
      stdin: JSON list of hex payloads (from kvctl's KvEventPublisher). Decodes each with
      msgspec.msgpack.Decoder(KVEventBatch) and re-encodes with SGLang's encoder; prints a JSON
      list of {"equal": bytes identical, "batch": decoded as JSON}.
  fixtures --out DIR
      Runs a real ZmqEventPublisher and a pyzmq SUB in this process, publishes scripted scenarios
      and writes each captured multipart message as hex frames into DIR/<name>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import time
import types
from pathlib import Path
from typing import Any, Optional

_spec = importlib.util.find_spec("sglang")
if _spec is None or not _spec.submodule_search_locations:
    raise ImportError("sglang is not installed in this Python environment")
SGLANG_DIR = Path(list(_spec.submodule_search_locations)[0])
HOW_LOADED: list[str] = []


def _package(name: str, path: Path) -> None:
    if name not in sys.modules:
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]  # type: ignore[attr-defined]
        sys.modules[name] = mod


def load_kv_events() -> types.ModuleType:
    """Import sglang/srt/disaggregation/kv_events.py from the installed release."""
    name = "sglang.srt.disaggregation.kv_events"
    if name in sys.modules:
        return sys.modules[name]
    _package("sglang", SGLANG_DIR)
    _package("sglang.srt", SGLANG_DIR / "srt")
    _package("sglang.srt.disaggregation", SGLANG_DIR / "srt" / "disaggregation")
    _package("sglang.srt.utils", SGLANG_DIR / "srt" / "utils")
    try:
        import sglang.srt.runtime_context  # noqa: F401
    except Exception:
        stub = types.ModuleType("sglang.srt.runtime_context")

        def get_parallel():  # pragma: no cover - never called by the publisher
            raise RuntimeError("stub: no runtime context in the oracle")

        stub.get_parallel = get_parallel  # type: ignore[attr-defined]
        sys.modules["sglang.srt.runtime_context"] = stub
        HOW_LOADED.append("stubbed runtime_context.get_parallel")
    try:
        import sglang.srt.utils.network  # noqa: F401
    except Exception:
        stub = types.ModuleType("sglang.srt.utils.network")
        stub.NetworkAddress = object  # type: ignore[attr-defined]
        sys.modules["sglang.srt.utils.network"] = stub
        HOW_LOADED.append("stubbed utils.network.NetworkAddress")
    try:
        import pydantic  # noqa: F401
    except Exception:
        stub = types.ModuleType("pydantic")
        stub.BaseModel = type("BaseModel", (), {})  # type: ignore[attr-defined]
        sys.modules["pydantic"] = stub
        HOW_LOADED.append("stubbed pydantic.BaseModel")
    spec = importlib.util.spec_from_file_location(name, SGLANG_DIR / "srt" / "disaggregation" / "kv_events.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


kv = load_kv_events()


# Page hashes as SGLang's get_hash_str computes them (sha256 chain over le32 token ids, prior =
# the previous page's raw digest), int64 = first 8 bytes big-endian signed (hash_str_to_int64).
# The oracle only needs *some* correct hashes to publish; kvctl's hash contract is proven
# against SGLang's own functions by python/oracles/sglang_hash_vectors.py.
def page_digests(tokens: list[int], page: int, prior: Optional[bytes]) -> list[bytes]:
    out = []
    for start in range(0, len(tokens) - len(tokens) % page, page):
        h = hashlib.sha256()
        if prior:
            h.update(prior)
        for t in tokens[start : start + page]:
            h.update(t.to_bytes(4, "little", signed=False))
        prior = h.digest()
        out.append(prior)
    return out


def to_int64(d: bytes) -> int:
    return int.from_bytes(d[:8], "big", signed=True)


SALT_TAG = b"sglang-cache-salt-v1\0"


class Builder:
    """Turns JSON event specs into SGLang's own event structs, remembering digests for chaining."""

    def __init__(self) -> None:
        self.digests: dict[int, bytes] = {}

    def event(self, spec: dict[str, Any]):
        t = spec["type"]
        if t == "AllBlocksCleared":
            return kv.AllBlocksCleared()
        if t == "BlockRemoved":
            return kv.BlockRemoved(block_hashes=[int(h) for h in spec["hashes"]], medium=spec.get("medium", kv.StorageMedium.GPU.value))
        tokens = list(spec["tokens"])
        page = int(spec.get("page", 64))
        parent = None if spec.get("parent") is None else int(spec["parent"])
        hashes = None if spec.get("hashes") is None else [int(h) for h in spec["hashes"]]
        if hashes is None:
            prior = self.digests.get(parent) if parent is not None else None
            if parent is None and spec.get("cache_salt") is not None:
                prior = hashlib.sha256(SALT_TAG + spec["cache_salt"].encode()).digest()
            ds = page_digests(tokens, page, prior)
            hashes = [to_int64(d) for d in ds]
            for h, d in zip(hashes, ds):
                self.digests[h] = d
        return kv.BlockStored(
            block_hashes=list(hashes),
            parent_block_hash=parent,
            token_ids=tokens,
            block_size=int(spec.get("block_size", page)),
            lora_id=spec.get("lora_id"),
            medium=spec.get("medium", kv.StorageMedium.GPU.value),
            cache_salt=spec.get("cache_salt"),
            session_id=spec.get("session_id"),
            lora_name=spec.get("lora_name"),
        )

    def batch(self, cmd: dict[str, Any]):
        return kv.KVEventBatch(ts=float(cmd.get("ts", time.time())), events=[self.event(e) for e in cmd["events"]])


class _XpubContext:
    """Hands out an XPUB where SGLang's publisher asks for a PUB: the same frames on the wire, but
    subscriptions become visible. ZMQ silently drops what a PUB sends before a subscriber's
    subscription has reached it, and a plain PUB cannot tell when that happened; with XPUB a test
    waits for the subscription instead of sleeping."""

    def __init__(self, real):
        self.real = real

    def socket(self, kind, *args, **kwargs):
        import zmq

        if kind != zmq.PUB:
            return self.real.socket(kind, *args, **kwargs)
        sock = self.real.socket(zmq.XPUB, *args, **kwargs)
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscriber's subscription, not only new topics
        return sock


class ObservablePublisher(kv.ZmqEventPublisher):
    """SGLang's ZmqEventPublisher, unchanged but for the XPUB socket (see _XpubContext)."""

    subscriptions = 0

    def _socket_setup(self) -> None:
        real = self._ctx
        self._ctx = _XpubContext(real)
        try:
            super()._socket_setup()
        finally:
            self._ctx = real

    def wait_subscribers(self, count: int, timeout_s: float) -> bool:
        # Only between publishes (wait_sent ran): the publisher thread is not using the socket.
        deadline = time.monotonic() + timeout_s
        while self.subscriptions < count and time.monotonic() < deadline:
            if self._pub.poll(100):
                if self._pub.recv()[:1] == b"\x01":
                    self.subscriptions += 1
        return self.subscriptions >= count


def make_publisher(endpoint: str, replay: Optional[str], topic: str):
    return ObservablePublisher(attn_dp_rank=0, endpoint=endpoint, replay_endpoint=replay, topic=topic, bind=True)


def wait_sent(pub) -> None:
    pub._event_queue.join()  # task_done() runs after send_multipart and the buffer append


def serve(args: argparse.Namespace) -> int:
    pub = make_publisher(args.endpoint, args.replay, args.topic)
    builder = Builder()
    drop_next = False
    print("READY " + ";".join(HOW_LOADED or ["sglang kv_events.py loaded verbatim"]), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        if op == "drop":
            drop_next = True
            print("OK", flush=True)
        elif op == "restart":
            pub.shutdown()
            time.sleep(0.2)
            pub = make_publisher(args.endpoint, args.replay, args.topic)
            print("OK", flush=True)
        elif op == "wait_subscribers":
            want = int(cmd.get("count", 1))
            if pub.wait_subscribers(want, float(cmd.get("timeout_s", 60))):
                print(f"OK {pub.subscriptions}", flush=True)
            else:
                print(f"ERR {pub.subscriptions} of {want} subscription(s) before the timeout", flush=True)
        elif op == "publish":
            batch = builder.batch(cmd)
            if drop_next:
                drop_next = False
                sock = pub._pub
                real = sock.send_multipart
                # Lose this one batch on the wire only: the real thread still numbers and buffers it.
                sock.send_multipart = lambda *a, **k: setattr(sock, "send_multipart", real)  # type: ignore[method-assign]
            seq = pub._seq_gen.__reduce__()[1][0] if hasattr(pub._seq_gen, "__reduce__") else -1
            pub.publish(batch)
            wait_sent(pub)
            print(f"SENT {seq}", flush=True)
        else:
            print(f"ERR unknown op {op}", flush=True)
    pub.shutdown()
    return 0


def decode(_: argparse.Namespace) -> int:
    payloads = json.load(sys.stdin)
    dec = kv.msgspec.msgpack.Decoder(kv.KVEventBatch)
    enc = kv.msgspec.msgpack.Encoder()
    out = []
    for hx in payloads:
        raw = bytes.fromhex(hx)
        batch = dec.decode(raw)
        out.append({"equal": enc.encode(batch) == raw, "batch": json.loads(kv.msgspec.json.encode(batch))})
    print(json.dumps(out))
    return 0


SCENARIOS: dict[str, list[dict[str, Any]]] = {}


def _scenarios() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    a = list(range(1, 129))  # two pages of 64
    b = list(range(1000, 1064))
    return {
        "sglang-basic": (
            "one 2-page coalesced BlockStored (GPU) chained from the root, a child page, a removal, a clear",
            [
                {"op": "publish", "ts": 1700000000.5, "events": [{"type": "BlockStored", "tokens": a, "page": 64}]},
                {"op": "publish", "ts": 1700000001.0, "events": [{"type": "BlockStored", "tokens": b, "page": 64, "parent": "$a1"}]},
                {"op": "publish", "ts": 1700000002.25, "events": [{"type": "BlockRemoved", "hashes": ["$b0"]}]},
                {"op": "publish", "ts": 1700000003.0, "events": [{"type": "AllBlocksCleared"}]},
            ],
        ),
        "sglang-tiers": (
            "medium transitions GPU -> CPU_PINNED -> removed: store GPU, store CPU_PINNED, remove GPU, remove CPU_PINNED",
            [
                {"op": "publish", "ts": 1700000010.0, "events": [{"type": "BlockStored", "tokens": a, "page": 64}]},
                {"op": "publish", "ts": 1700000011.0, "events": [
                    {"type": "BlockStored", "tokens": a, "page": 64, "medium": "CPU_PINNED"},
                    {"type": "BlockRemoved", "hashes": ["$a0", "$a1"], "medium": "GPU"}]},
                {"op": "publish", "ts": 1700000012.0, "events": [{"type": "BlockRemoved", "hashes": ["$a0", "$a1"], "medium": "CPU_PINNED"}]},
            ],
        ),
        "sglang-salted": (
            "a BlockStored with cache_salt and session_id (salted chain; optional fields present)",
            [{"op": "publish", "ts": 1700000020.0, "events": [
                {"type": "BlockStored", "tokens": a[:64], "page": 64, "cache_salt": "tenant-a", "session_id": "s1"}]}],
        ),
    }


def fixtures(args: argparse.Namespace) -> int:
    import zmq

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = zmq.Context.instance()
    for name, (desc, cmds) in _scenarios().items():
        port = _free_port()
        pub = kv.ZmqEventPublisher(attn_dp_rank=0, endpoint=f"tcp://127.0.0.1:{port}", topic="kv-events", bind=True)
        sub = ctx.socket(zmq.SUB)
        sub.connect(f"tcp://127.0.0.1:{port}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.RCVTIMEO, 5000)
        time.sleep(0.5)  # slow joiner
        builder = Builder()
        named: dict[str, int] = {}
        frames_out = []
        for cmd in cmds:
            events = []
            for e in cmd["events"]:
                e = dict(e)
                if isinstance(e.get("parent"), str):
                    e["parent"] = named[e["parent"][1:]]
                if "hashes" in e:
                    e["hashes"] = [named[h[1:]] if isinstance(h, str) else h for h in e["hashes"]]
                ev = builder.event(e)
                if e["type"] == "BlockStored":
                    key = "a" if e["tokens"][0] == 1 else "b"
                    for i, h in enumerate(ev.block_hashes):
                        named.setdefault(f"{key}{i}", h)
                events.append(ev)
            pub.publish(kv.KVEventBatch(ts=cmd["ts"], events=events))
            frames = sub.recv_multipart()
            frames_out.append([f.hex() for f in frames])
        pub.shutdown()
        sub.close(linger=0)
        (out / f"{name}.json").write_text(
            json.dumps(
                {
                    "description": desc,
                    "generator": "python/oracles/kv_events_publisher.py fixtures (SGLang's ZmqEventPublisher, pinned release)",
                    "sglang_version": _version(),
                    "named_hashes": {k: str(v) for k, v in named.items()},
                    "messages": frames_out,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _version() -> str:
    from importlib.metadata import version

    return version("sglang")


def main() -> int:
    p = argparse.ArgumentParser()
    sp = p.add_subparsers(dest="mode", required=True)
    s = sp.add_parser("serve")
    s.add_argument("--endpoint", required=True)
    s.add_argument("--replay")
    s.add_argument("--topic", default="")
    sp.add_parser("decode")
    f = sp.add_parser("fixtures")
    f.add_argument("--out", required=True)
    a = p.parse_args()
    return {"serve": serve, "decode": decode, "fixtures": fixtures}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
