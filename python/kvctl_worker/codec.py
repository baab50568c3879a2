"""Int64-exact decoding of bare commands and envelopes (commands.md, "Body")."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, List, Optional

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
MAX_HASHES = 65536
KNOWN_VERSIONS = (1,)
KNOWN_TYPES = ("Cache", "Inspect", "Prune", "Think", "Pause", "RenewLease", "RevokeLease",
               "Warm", "ToolStart", "ToolEnd")


class CommandError(ValueError):
    """Invalid input; ``field`` names what was wrong (the ack's reason)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclasses.dataclass
class Command:
    type: str
    fields: dict
    id: Optional[str] = None
    issued_at_ms: Optional[int] = None


def to_int64(value: Any, field: str) -> int:
    """Accept an int or a decimal string; fold uint64 into int64; reject the rest."""
    if isinstance(value, bool):
        raise CommandError(field, "expected an integer, got a boolean")
    if isinstance(value, str):
        s = value.strip()
        if not s or not (s.lstrip("+-").isdigit()):
            raise CommandError(field, f"not a decimal integer: {value!r}")
        value = int(s, 10)
    if not isinstance(value, int):
        raise CommandError(field, f"expected an integer, got {type(value).__name__}")
    if INT64_MIN <= value <= INT64_MAX:
        return value
    if INT64_MAX < value <= UINT64_MAX:
        return value - (1 << 64)
    raise CommandError(field, f"out of int64 range: {value}")


def hash_list(value: Any, field: str, limit: int = MAX_HASHES) -> List[int]:
    if not isinstance(value, list):
        raise CommandError(field, "expected a list of int64")
    if len(value) > limit:
        raise CommandError(field, f"list of {len(value)} over the limit {limit}")
    return [to_int64(v, f"{field}[{i}]") for i, v in enumerate(value)]


def _opt_int(body: dict, key: str, minimum: int = 0) -> Optional[int]:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise CommandError(key, f"expected an integer >= {minimum}")
    return v


def _validate(cmd: dict) -> Command:
    if not isinstance(cmd, dict):
        raise CommandError("command", "expected an object")
    t = cmd.get("type")
    if t not in KNOWN_TYPES:
        raise CommandError("type", f"unknown command type {t!r}")
    fields = dict(cmd)
    fields.pop("type")
    if t == "Cache":
        if "block_hashes" not in cmd:
            raise CommandError("block_hashes", "missing")
        fields["block_hashes"] = hash_list(cmd["block_hashes"], "block_hashes")
        if not isinstance(cmd.get("pin"), bool):
            raise CommandError("pin", "missing or not a boolean")
        fields["ttl_seconds"] = _opt_int(cmd, "ttl_seconds", 1)
    elif t == "Inspect":
        if cmd.get("block_hashes") is not None:
            fields["block_hashes"] = hash_list(cmd["block_hashes"], "block_hashes")
    return Command(type=t, fields=fields)


def decode(body: Any) -> Command:
    """Decode bytes / str / parsed JSON into a Command; raise CommandError naming the field."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            raise CommandError("body", "not UTF-8") from None
    if isinstance(body, str):
        try:
            body = json.loads(body)  # Python ints are exact: no float rounding of int64
        except ValueError as e:
            raise CommandError("body", f"not JSON ({e})") from None
    if not isinstance(body, dict):
        raise CommandError("body", "expected a JSON object")
    if "command" in body or "version" in body:
        if body.get("version") not in KNOWN_VERSIONS:
            raise CommandError("version", f"unknown version {body.get('version')!r}")
        cid = body.get("id")
        if cid is not None and not isinstance(cid, str):
            raise CommandError("id", "expected a string")
        out = _validate(body.get("command"))
        out.id = cid
        out.issued_at_ms = _opt_int(body, "issued_at_ms")
        return out
    return _validate(body)
