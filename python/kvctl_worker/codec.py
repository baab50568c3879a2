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


MAX_TOKENS = 65536 * 64
TTL_MIN, TTL_MAX = 1, 30 * 24 * 3600
TOKEN_MAX = (1 << 31) - 1
SAFE_INT_MAX = (1 << 53) - 1
TARGET_TIERS = ("GPU", "CPU_TIER1")

# type -> {field: required?}  (strict objects: anything else is an unknown field)
SCHEMA = {
    "Cache": {"block_hashes": True, "pin": True, "ttl_seconds": False},
    "Prune": {"after_block_hash": True, "force": False},
    "Think": {"block_hashes": True, "transient": True},
    "Pause": {"block_hashes": True, "ttl_seconds": True, "lease_id": True},
    "RenewLease": {"lease_id": True, "new_ttl_seconds": True},
    "RevokeLease": {"lease_id": True},
    "Warm": {"block_keys": True, "token_ids": False, "target_tier": True},
    "ToolStart": {"session_id": True, "block_hashes": True},
    "ToolEnd": {"session_id": True, "epoch": True},
    "Inspect": {"block_hashes": False, "session_id": False, "lease_id": False},
}
ENVELOPE_FIELDS = ("version", "id", "issued_at_ms", "command")


def _int(v: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise CommandError(field, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise CommandError(field, f"out of range {lo}..{hi}: {v}")
    return v


def _ttl(v: Any, field: str) -> int:
    return _int(v, field, TTL_MIN, TTL_MAX)


def _opt_int(body: dict, key: str) -> Optional[int]:
    v = body.get(key)
    return None if v is None else _int(v, key, 0, SAFE_INT_MAX)


def ident(v: Any, field: str) -> str:
    """ids: 1-128 printable ASCII without spaces (src/protocol/README.md)."""
    if not isinstance(v, str):
        raise CommandError(field, "expected a string")
    if not 1 <= len(v) <= 128 or any(not (33 <= ord(c) <= 126) for c in v):
        raise CommandError(field, "expected 1-128 printable ASCII characters without spaces")
    return v


def _bool(v: Any, field: str) -> bool:
    if not isinstance(v, bool):
        raise CommandError(field, "missing or not a boolean")
    return v


def storage_key(v: Any, field: str) -> str:
    if not isinstance(v, str) or len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
        raise CommandError(field, "expected a storage key (64 lowercase hex)")
    return v


def _validate(cmd: Any, prefix: str = "") -> Command:
    if not isinstance(cmd, dict):
        raise CommandError(prefix.rstrip(".") or "body", "expected an object")
    t = cmd.get("type")
    if t not in KNOWN_TYPES:
        raise CommandError(prefix + "type", f"unknown command type {t!r}")
    schema = SCHEMA[t]
    for k in cmd:
        if k != "type" and k not in schema:
            raise CommandError(prefix + str(k), "unknown field")
    for k, required in schema.items():
        if required and k not in cmd:  # Pause's ttl_seconds must be present (null = until revoked)
            raise CommandError(prefix + k, "missing")
    f: dict = {}
    P = prefix
    if t == "Cache":
        f["block_hashes"] = hash_list(cmd["block_hashes"], P + "block_hashes")
        f["pin"] = _bool(cmd["pin"], P + "pin")
        f["ttl_seconds"] = None if cmd.get("ttl_seconds") is None else _ttl(cmd["ttl_seconds"], P + "ttl_seconds")
    elif t == "Prune":
        f["after_block_hash"] = to_int64(cmd["after_block_hash"], P + "after_block_hash")
        f["force"] = False if cmd.get("force") is None else _bool(cmd["force"], P + "force")
    elif t == "Think":
        f["block_hashes"] = hash_list(cmd["block_hashes"], P + "block_hashes")
        f["transient"] = _bool(cmd["transient"], P + "transient")
    elif t == "Pause":
        f["block_hashes"] = hash_list(cmd["block_hashes"], P + "block_hashes")
        f["ttl_seconds"] = None if cmd["ttl_seconds"] is None else _ttl(cmd["ttl_seconds"], P + "ttl_seconds")
        f["lease_id"] = ident(cmd["lease_id"], P + "lease_id")
    elif t == "RenewLease":
        f["lease_id"] = ident(cmd["lease_id"], P + "lease_id")
        f["new_ttl_seconds"] = _ttl(cmd["new_ttl_seconds"], P + "new_ttl_seconds")
    elif t == "RevokeLease":
        f["lease_id"] = ident(cmd["lease_id"], P + "lease_id")
    elif t == "Warm":
        keys = cmd["block_keys"]
        if not isinstance(keys, list):
            raise CommandError(P + "block_keys", "expected a list of storage keys")
        if len(keys) > MAX_HASHES:
            raise CommandError(P + "block_keys", f"list of {len(keys)} over the limit {MAX_HASHES}")
        f["block_keys"] = [storage_key(k, f"{P}block_keys[{i}]") for i, k in enumerate(keys)]
        toks = cmd.get("token_ids")
        if toks is not None:
            if not isinstance(toks, list):
                raise CommandError(P + "token_ids", "expected a list of token ids")
            if len(toks) > MAX_TOKENS:
                raise CommandError(P + "token_ids", f"list of {len(toks)} over the limit {MAX_TOKENS}")
            toks = [_int(x, f"{P}token_ids[{i}]", 0, TOKEN_MAX) for i, x in enumerate(toks)]
        f["token_ids"] = toks
        if cmd["target_tier"] not in TARGET_TIERS:
            raise CommandError(P + "target_tier", f"expected one of {', '.join(TARGET_TIERS)}")
        f["target_tier"] = cmd["target_tier"]
    elif t == "ToolStart":
        f["session_id"] = ident(cmd["session_id"], P + "session_id")
        f["block_hashes"] = hash_list(cmd["block_hashes"], P + "block_hashes")
    elif t == "ToolEnd":
        f["session_id"] = ident(cmd["session_id"], P + "session_id")
        f["epoch"] = _int(cmd["epoch"], P + "epoch", 0, SAFE_INT_MAX)
    elif t == "Inspect":
        f["block_hashes"] = None if cmd.get("block_hashes") is None else hash_list(cmd["block_hashes"], P + "block_hashes")
        f["session_id"] = None if cmd.get("session_id") is None else ident(cmd["session_id"], P + "session_id")
        f["lease_id"] = None if cmd.get("lease_id") is None else ident(cmd["lease_id"], P + "lease_id")
    return Command(type=t, fields=f)


def peek_id_type(body: Any):
    """Best-effort (id, type) of an undecodable body, for the rejection ack; never raises."""
    try:
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(bytes(body).decode("utf-8"))
        elif isinstance(body, str):
            body = json.loads(body)
        if not isinstance(body, dict):
            return None, None
        cid = body.get("id") if isinstance(body.get("id"), str) else None
        inner = body.get("command", body)
        t = inner.get("type") if isinstance(inner, dict) else None
        return cid, (t if t in KNOWN_TYPES else None)
    except Exception:
        return None, None


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
        except (ValueError, RecursionError) as e:
            raise CommandError("body", f"not JSON ({type(e).__name__}: {e})") from None
    if not isinstance(body, dict):
        raise CommandError("body", "expected a JSON object")
    if "command" in body or "version" in body:
        v = body.get("version")
        if isinstance(v, bool) or v not in KNOWN_VERSIONS:
            raise CommandError("version", f"unknown version {v!r}")
        for k in body:
            if k not in ENVELOPE_FIELDS:
                raise CommandError(str(k), "unknown field")
        cid = body.get("id")
        if cid is not None:
            cid = ident(cid, "id")
        issued = _opt_int(body, "issued_at_ms")
        if "command" not in body:
            raise CommandError("command", "missing")
        out = _validate(body.get("command"), "command.")
        out.id = cid
        out.issued_at_ms = issued
        return out
    return _validate(body)
