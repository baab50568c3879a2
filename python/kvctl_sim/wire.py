"""The engine <-> fleet wire: frames on two pipes (the engine's fds 3 -> 4 of this process, so
stdout and stderr stay free for logs). A frame is ``u32 length | u32 json length | json | blob``
(little-endian); the JSON names byte ranges of the blob (``[offset, length]``) for token ids and
for payloads that must travel exactly (commands, acks, KV-event batches)."""
from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO, List, Optional, Tuple

_HEAD = struct.Struct("<II")


def read_frame(f: BinaryIO) -> Optional[Tuple[Any, memoryview]]:
    head = f.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return None
    total, jlen = _HEAD.unpack(head)
    body = f.read(total - 4)
    if len(body) < total - 4:
        return None
    view = memoryview(body)
    return json.loads(bytes(view[:jlen])), view[jlen:]


class Blob:
    """The binary part of an outgoing frame."""

    def __init__(self) -> None:
        self.parts: List[bytes] = []
        self.size = 0

    def put(self, data: bytes) -> List[int]:
        ref = [self.size, len(data)]
        self.parts.append(data)
        self.size += len(data)
        return ref


def write_frame(f: BinaryIO, obj: Any, blob: Blob) -> None:
    js = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    f.write(_HEAD.pack(4 + len(js) + blob.size, len(js)))
    f.write(js)
    for p in blob.parts:
        f.write(p)
    f.flush()
