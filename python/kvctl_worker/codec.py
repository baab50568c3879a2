"""Int64-exact decoding of bare commands and envelopes (docs/protocol.md, "Body").

The second reading of the contract beside src/protocol/ (zod): both run the conformance corpus of
test/fixtures/protocol/ and must give the same answer and name the same field for every body.
Checks run in the zod schemas' order (shape fields in declaration order, unknown fields last), so
that a body with several problems is refused naming the same first one on both sides.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, List, Optional

from .strict_json import HugeInt, JsonError, field_path, loads
from .wire_tables import (DEADLINE_MAX_MS, DEADLINE_MIN_MS, ENVELOPE_FIELDS, KNOWN_TYPES, KNOWN_VERSIONS,
                          MAX_HASHES, MAX_ID_LENGTH, MAX_TOKENS, NULLABLE, NULLISH, REQUIRED, SAFE_INT_MAX,
                          SCHEMA, TARGET_TIERS, TOKEN_MAX, TTL_MAX, TTL_MIN)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
_ID = re.compile(r"[\x21-\x7e]+")
_STORAGE_KEY = re.compile(r"[0-9a-f]{64}")


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

    def to_wire(self) -> list:
        """The decoded command as the tokenizer -> scheduler IPC carries it (plain msgpack values),
        so the scheduler applies what the subscriber decoded instead of decoding the body again."""
        return [self.type, self.fields, self.id, self.issued_at_ms]

    @classmethod
    def from_wire(cls, wire: list) -> "Command":
        """``to_wire``'s list -> the Command (already validated: it was decoded on the other side)."""
        ctype, fields, cid, issued_at_ms = wire
        return cls(type=ctype, fields=fields, id=cid, issued_at_ms=issued_at_ms)


def _whole(v: Any) -> Optional[int]:
    """A JSON number that is a whole number exact as a double (what the TypeScript side reads as
    an integer: ``1.0`` and ``1e2`` are integers there), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer() and abs(v) <= SAFE_INT_MAX:
        return int(v)
    return None


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float, HugeInt)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), type(v).__name__)


def to_int64(value: Any, field: str) -> int:
    """An int64 from an integer literal or a decimal string; anything outside int64 is refused."""
    if isinstance(value, HugeInt):
        raise CommandError(field, f"{value[:40]}... is outside the signed 64-bit range")
    if isinstance(value, str):
        if len(value) > 40 or not _DECIMAL.fullmatch(value):
            raise CommandError(field, f"expected a decimal int64 string, got {value[:40]!r}")
        v = int(value, 10)
    elif isinstance(value, float):
        w = _whole(value)
        if w is None:
            raise CommandError(field, f"expected an int64, got {value!r}")
        v = w
    elif isinstance(value, int) and not isinstance(value, bool):
        v = value
    else:
        raise CommandError(field, f"expected an int64, got {_kind(value)}")
    if not INT64_MIN <= v <= INT64_MAX:
        raise CommandError(field, f"{v} is outside the signed 64-bit range")
    return v


def hash_list(value: Any, field: str, limit: int = MAX_HASHES) -> List[int]:
    if not isinstance(value, list):
        raise CommandError(field, f"expected an array of int64, got {_kind(value)}")
    if len(value) > limit:
        raise CommandError(field, f"{len(value)} entries is over the limit of {limit}")
    # What a conforming sender sends: plain integers in range, each what to_int64 returns as is.
    if all(type(v) is int and INT64_MIN <= v <= INT64_MAX for v in value):
        return list(value)
    return [to_int64(v, f"{field}[{i}]") for i, v in enumerate(value)]


def _int(v: Any, field: str, lo: int, hi: int) -> int:
    w = _whole(v)
    if w is None:
        raise CommandError(field, f"expected an integer, got {_kind(v)}")
    if not lo <= w <= hi:
        raise CommandError(field, f"out of range {lo}..{hi}: {w}")
    return w


def _ttl(v: Any, field: str) -> int:
    return _int(v, field, TTL_MIN, TTL_MAX)


def _deadline(v: Any, field: str) -> int:
    return _int(v, field, DEADLINE_MIN_MS, DEADLINE_MAX_MS)


def ident(v: Any, field: str) -> str:
    """ids: 1-128 printable ASCII without spaces (src/protocol/fields.ts idString)."""
    if not isinstance(v, str):
        raise CommandError(field, f"expected a string, got {_kind(v)}")
    if not 1 <= len(v) <= MAX_ID_LENGTH or not _ID.fullmatch(v):
        raise CommandError(field, "expected 1-128 printable ASCII characters without spaces")
    return v


def _bool(v: Any, field: str) -> bool:
    if not isinstance(v, bool):
        raise CommandError(field, f"expected a boolean, got {_kind(v)}")
    return v


def storage_key(v: Any, field: str) -> str:
    if not isinstance(v, str) or not _STORAGE_KEY.fullmatch(v):
        raise CommandError(field, "expected a storage key (64 lowercase hex)")
    return v


def _storage_keys(v: Any, field: str) -> List[str]:
    if not isinstance(v, list):
        raise CommandError(field, f"expected an array of storage keys, got {_kind(v)}")
    if len(v) > MAX_HASHES:
        raise CommandError(field, f"{len(v)} entries is over the limit of {MAX_HASHES}")
    return [storage_key(k, f"{field}[{i}]") for i, k in enumerate(v)]


def _token_ids(v: Any, field: str) -> List[int]:
    if not isinstance(v, list):
        raise CommandError(field, f"expected an array of token ids, got {_kind(v)}")
    if len(v) > MAX_TOKENS:
        raise CommandError(field, f"{len(v)} entries is over the limit of {MAX_TOKENS}")
    return [_int(x, f"{field}[{i}]", 0, TOKEN_MAX) for i, x in enumerate(v)]


def _tier(v: Any, field: str) -> str:
    if v not in TARGET_TIERS or not isinstance(v, str):
        raise CommandError(field, f"expected one of {', '.join(TARGET_TIERS)}")
    return v


def _count(v: Any, field: str) -> int:
    return _int(v, field, 0, SAFE_INT_MAX)


# SCHEMA (wire_tables.py, generated from docs/protocol.schema.json) names each field's check.
_CHECKS = {"int64[]": hash_list, "int64": to_int64, "bool": _bool, "ttl": _ttl, "deadline": _deadline, "id": ident,
           "count": _count, "keys": _storage_keys, "tokens": _token_ids, "tier": _tier}


def _validate(cmd: Any, prefix: str = "") -> Command:
    """A command object -> Command with every schema field present (absent -> None)."""
    if not isinstance(cmd, dict):
        raise CommandError(prefix.rstrip(".") or "body", f"expected an object, got {_kind(cmd)}")
    t = cmd.get("type")
    if not isinstance(t, str) or t not in KNOWN_TYPES:
        shown = "(missing)" if "type" not in cmd else repr(t)
        raise CommandError(prefix + "type", f"unknown command type {shown} (expected one of {', '.join(KNOWN_TYPES)})")
    fields: dict = {}
    for name, kind, presence in SCHEMA[t]:
        if name not in cmd:
            if presence in (REQUIRED, NULLABLE):
                raise CommandError(prefix + name, "missing")
            fields[name] = None
            continue
        v = cmd[name]
        if v is None and presence in (NULLABLE, NULLISH):
            fields[name] = None
            continue
        fields[name] = _CHECKS[kind](v, prefix + name)
    for k in cmd:
        if k != "type" and k not in fields:
            raise CommandError(prefix + str(k), "unknown field")
    return Command(type=t, fields=fields)


def peek_id_type(body: Any):
    """Best-effort (id, type) of an undecodable body, for the rejection ack; never raises."""
    try:
        if isinstance(body, (bytes, bytearray)):
            body = bytes(body).decode("utf-8")
        if isinstance(body, str):
            body = loads(body)
        if not isinstance(body, dict):
            return None, None
        cid = body.get("id") if isinstance(body.get("id"), str) else None
        if cid is not None:
            try:
                ident(cid, "id")
            except CommandError:
                cid = None
        inner = body.get("command", body)
        t = inner.get("type") if isinstance(inner, dict) else None
        return cid, (t if isinstance(t, str) and t in KNOWN_TYPES else None)
    except Exception:
        return None, None


def parse_body(body: Any) -> Any:
    """bytes / str -> the JSON value (a dict passes through); CommandError naming ``body`` or
    the repeated key."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise CommandError("body", "not JSON: body is not valid UTF-8") from None
    if isinstance(body, str):
        try:
            return loads(body)
        except JsonError as e:
            if e.path:
                raise CommandError(field_path(e.path), "duplicate key") from None
            raise CommandError("body", f"not JSON: {e}") from None
    return body


def decode(body: Any) -> Command:
    """Decode bytes / str / parsed JSON into a Command; raise CommandError naming the field."""
    body = parse_body(body)
    if not isinstance(body, dict):
        raise CommandError("body", "expected a JSON object")
    if "command" not in body and "version" not in body:
        return _validate(body)
    v = body.get("version")
    if "version" not in body or isinstance(v, bool) or v not in KNOWN_VERSIONS:
        raise CommandError("version", f"unsupported envelope version {v!r} (this side speaks 1)")
    if "id" not in body:
        raise CommandError("id", "missing")
    cid = ident(body["id"], "id")
    if "issued_at_ms" not in body:
        raise CommandError("issued_at_ms", "missing")
    issued = _count(body["issued_at_ms"], "issued_at_ms")
    if "command" not in body:
        raise CommandError("command", "missing")
    out = _validate(body["command"], "command.")
    for k in body:
        if k not in ENVELOPE_FIELDS:
            raise CommandError(str(k), "unknown field")
    out.id = cid
    out.issued_at_ms = issued
    return out


def normalised(cmd: Command) -> dict:
    """The corpus's normalised form: envelope parts and every schema field in schema order."""
    return {"id": cmd.id, "issued_at_ms": cmd.issued_at_ms,
            "command": {"type": cmd.type, **{name: cmd.fields[name] for name, _k, _p in SCHEMA[cmd.type]}}}
