"""Whether kvctl is on in this process, and with what settings: read from SGLang's server args
when a cache or the HTTP server asks (never at import time).

kvctl is on when ``--kv-control-nats-url`` is set (NATS subscriber and HTTP routes) or when
``--kv-control-config '{...}'`` is given (a JSON object in the style of ``--kv-events-config``;
``'{}'`` = HTTP routes only). With neither, every hook is a no-op and SGLang serves exactly as
unpatched: its Rust tree core is selected, nothing is hashed or indexed on insert, no kvctl route is
registered and no subscriber starts.

``--kv-control-config`` keys (all optional): ``nats_url``, ``worker_id``, ``subject_prefix``,
``nats_creds``, ``nats_user``, ``nats_password_file``, ``nats_token_file`` (the same settings as the
``--kv-control-*`` flags, which win when both are given), ``http`` (register the HTTP routes,
default true), ``pin_budget_fraction`` (share of the host pool pins may hold, default 0.5),
``dedupe_window_s`` (600) / ``dedupe_max_ids`` (100000), ``tool_ttl_s`` (900), ``prefetch_hold_s``
(how long what a Prefetch made resident is held on the device for its request, default 10), ``http_open``
(serve the HTTP routes without SGLang's ``--admin-api-key``: the same as ``--kvctl-http-open`` or env
``KVCTL_HTTP_OPEN=1``; default false, see http.py), ``commands`` (the command types this worker
accepts, default all of them; any other is rejected naming ``command.type``. It also picks the tree
core: SGLang's Rust core unless an accepted command needs the Python one, see cores.py).
"""
from __future__ import annotations

import dataclasses
import os
import types
from typing import Any, Optional

from .wire_tables import KNOWN_TYPES
from .server_args import FIELDS, ControlArgs, default_worker_id, from_server_args as control_args_from
from .strict_json import JsonError, loads


@dataclasses.dataclass(frozen=True)
class KvctlConfig:
    worker_id: Optional[str] = None  # None: identity.get_worker_id() (what the process set)
    control: Optional[ControlArgs] = None  # the NATS subscriber; None = HTTP routes only
    http: bool = True
    pin_budget_fraction: float = 0.5
    dedupe_window_s: float = 600.0
    dedupe_max_ids: int = 100_000
    tool_ttl_s: float = 900.0
    prefetch_hold_s: float = 10.0
    http_open: bool = False
    commands: frozenset = frozenset(KNOWN_TYPES)


_TUNING = {"http": bool, "pin_budget_fraction": float, "dedupe_window_s": float, "dedupe_max_ids": int,
           "tool_ttl_s": float, "prefetch_hold_s": float, "http_open": bool}
_FLAG_KEYS = {field[len("kv_control_"):]: field for field, _flag, _env, _help in FIELDS}


def _parse_config(text: Any) -> Optional[dict]:
    if text in (None, ""):
        return None
    if isinstance(text, dict):
        return dict(text)
    try:
        raw = loads(str(text))
    except JsonError as e:
        raise ValueError(f"--kv-control-config is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError("--kv-control-config must be a JSON object")
    for k in raw:
        if k not in _TUNING and k not in _FLAG_KEYS and k != "commands":
            raise ValueError(f"--kv-control-config: unknown key {k!r}")
    return raw


def _commands(value: Any) -> frozenset:
    """The ``commands`` setting: a list of command type names, each one of the contract's."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("--kv-control-config: commands must be a list of command type names")
    unknown = [v for v in value if v not in KNOWN_TYPES]
    if unknown:
        raise ValueError(f"--kv-control-config: commands: unknown command type {unknown[0]!r} "
                         f"(known: {', '.join(KNOWN_TYPES)})")
    return frozenset(value)


def from_server_args(server_args: Any) -> Optional[KvctlConfig]:
    """The config in ``server_args`` (a ServerArgs, its observability bag or any object with the
    same attribute names), or None when kvctl is off. Raises ValueError on a bad setting."""
    raw = _parse_config(getattr(server_args, "kv_control_config", None))
    merged = types.SimpleNamespace(port=getattr(server_args, "port", None))
    for key, field in _FLAG_KEYS.items():
        v = getattr(server_args, field, None)
        setattr(merged, field, v if v not in (None, "") else (raw or {}).get(key))
    control = control_args_from(merged)
    if raw is None and control is None:
        return None
    tuning = {}
    for k, kind in _TUNING.items():
        if raw and k in raw:
            v = raw[k]
            if kind is bool and not isinstance(v, bool) or kind is not bool and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"--kv-control-config: {k} must be a {kind.__name__}")
            tuning[k] = kind(v)
    if raw and "commands" in raw:
        tuning["commands"] = _commands(raw["commands"])
    if getattr(server_args, "kvctl_http_open", False) is True or os.environ.get("KVCTL_HTTP_OPEN") == "1":
        tuning["http_open"] = True
    worker_id = control.worker_id if control else (merged.kv_control_worker_id or default_worker_id(merged.port))
    return KvctlConfig(worker_id=worker_id, control=control, **tuning)


_UNSET = object()
_override: Any = _UNSET


def use(config: Optional[KvctlConfig]) -> None:
    """Sets this process's config explicitly (tests, the worker harness, benchmarks): a
    KvctlConfig = on, None = off. Caches built afterwards follow it."""
    global _override
    _override = config


def reset() -> None:
    """Back to reading SGLang's published server args."""
    global _override
    _override = _UNSET


def current() -> Optional[KvctlConfig]:
    """The config in effect: what ``use`` set, else the server args SGLang published for this
    process (runtime_context), else None (off: nothing published, or no kvctl flag)."""
    if _override is not _UNSET:
        return _override
    try:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args()
    except Exception:  # nothing published (a cache built outside a server): off
        return None
    return from_server_args(server_args)
