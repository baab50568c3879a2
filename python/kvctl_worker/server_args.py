"""The control subscriber's settings: SGLang server args (patch 0010 adds them to the
``observability`` namespace, next to ``--kv-events-config``) with environment fallbacks.

    --kv-control-nats-url        nats://host:4222[,nats://...]   (absent = subscriber off)
    --kv-control-worker-id       this worker's id (subject kv-control-{id}); env KVCTL_WORKER_ID;
                                 default hostname-port
    --kv-control-subject-prefix  default "kv-control"
    --kv-control-nats-creds      a .creds file (JWT + nkey seed);  env KVCTL_NATS_CREDS
    --kv-control-nats-user       env KVCTL_NATS_USER
    --kv-control-nats-password-file / --kv-control-nats-token-file
                                 files holding the secret; or the values themselves in env
                                 KVCTL_NATS_PASSWORD / KVCTL_NATS_TOKEN

Secrets are never taken as flag values: SGLang publishes its resolved server args and the launch
command line on /server_info (its redaction knows only the watermark secrets) and logs the server
args at startup, so a password on the command line would be served to anyone who can read
/server_info. A file path or the environment is not.

Absent ``--kv-control-nats-url`` (and no ``KVCTL_NATS_URL``) means the subscriber is off and
SGLang behaves exactly as before. ``from_server_args`` reads with getattr defaults, so it also
works on a ServerArgs without patch 0010 (then only the environment can turn it on).
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
from typing import Any, List, Optional

DEFAULT_SUBJECT_PREFIX = "kv-control"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")

# (field, flag, env, help): the single list patch 0010's fields mirror and the harness's argparse uses.
FIELDS = (
    ("kv_control_nats_url", "--kv-control-nats-url", "KVCTL_NATS_URL",
     "NATS server URL(s), comma separated, for the kvctl control subscriber. Absent = off."),
    ("kv_control_worker_id", "--kv-control-worker-id", "KVCTL_WORKER_ID",
     "This worker's id: the subscriber listens on <prefix>-<id> and <prefix>-broadcast."),
    ("kv_control_subject_prefix", "--kv-control-subject-prefix", "KVCTL_SUBJECT_PREFIX",
     "Subject prefix of the kvctl control plane (default kv-control)."),
    ("kv_control_nats_creds", "--kv-control-nats-creds", "KVCTL_NATS_CREDS",
     "NATS .creds file (JWT + nkey seed) for the control subscriber."),
    ("kv_control_nats_user", "--kv-control-nats-user", "KVCTL_NATS_USER", "NATS user."),
    ("kv_control_nats_password_file", "--kv-control-nats-password-file", "KVCTL_NATS_PASSWORD_FILE",
     "File holding the NATS password (or set KVCTL_NATS_PASSWORD)."),
    ("kv_control_nats_token_file", "--kv-control-nats-token-file", "KVCTL_NATS_TOKEN_FILE",
     "File holding the NATS token (or set KVCTL_NATS_TOKEN)."),
)


def _secret(value_env: str, file_path: Optional[str]) -> Optional[str]:
    v = os.environ.get(value_env)
    if v:
        return v
    if file_path:
        try:
            with open(file_path, "r", encoding="utf-8") as f:
                return f.read().strip()
        except OSError as e:
            raise ValueError(f"cannot read {file_path}: {e}") from None
    return None


@dataclasses.dataclass
class ControlArgs:
    servers: List[str]
    worker_id: str
    subject_prefix: str = DEFAULT_SUBJECT_PREFIX
    creds: Optional[str] = None
    user: Optional[str] = None
    password: Optional[str] = None
    token: Optional[str] = None

    @property
    def worker_subject(self) -> str:
        return f"{self.subject_prefix}-{self.worker_id}"

    @property
    def broadcast_subject(self) -> str:
        return f"{self.subject_prefix}-broadcast"

    def validate(self) -> "ControlArgs":
        if not _TOKEN.match(self.worker_id) or self.worker_id == "broadcast":
            raise ValueError(f"--kv-control-worker-id {self.worker_id!r}: use 1-128 of A-Z a-z 0-9 _ - "
                             "('broadcast' is reserved)")
        if not _PREFIX.match(self.subject_prefix):
            raise ValueError(f"--kv-control-subject-prefix {self.subject_prefix!r} is not a subject token list")
        if not self.servers:
            raise ValueError("--kv-control-nats-url is empty")
        return self


def _pick(obj: Any, field: str, env: str) -> Optional[str]:
    v = getattr(obj, field, None) if obj is not None else None
    if v in (None, ""):
        v = os.environ.get(env) or None
    return v


def default_worker_id(port: Any = None) -> str:
    """hostname-port: the same in every tokenizer process of one server (the queue group then
    spans them), different for two servers on one host; hostname-pid without a port."""
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:100]
    return f"{host}-{port}" if isinstance(port, int) and port > 0 else f"{host}-{os.getpid()}"


def from_server_args(server_args: Any) -> Optional[ControlArgs]:
    """ControlArgs from an SGLang ServerArgs (or any object with the same attribute names, an
    argparse Namespace say), environment as fallback; None when no NATS URL is set (off)."""
    vals = {f: _pick(server_args, f, env) for f, _flag, env, _h in FIELDS}
    url = vals["kv_control_nats_url"]
    if not url:
        return None
    return ControlArgs(
        servers=[u.strip() for u in str(url).split(",") if u.strip()],
        worker_id=vals["kv_control_worker_id"] or default_worker_id(getattr(server_args, "port", None)),
        subject_prefix=vals["kv_control_subject_prefix"] or DEFAULT_SUBJECT_PREFIX,
        creds=vals["kv_control_nats_creds"],
        user=vals["kv_control_nats_user"],
        password=_secret("KVCTL_NATS_PASSWORD", vals["kv_control_nats_password_file"]),
        token=_secret("KVCTL_NATS_TOKEN", vals["kv_control_nats_token_file"]),
    ).validate()


def add_cli_args(parser: Any) -> None:
    """The same flags on a plain argparse parser (the harness; SGLang gets them from patch 0010)."""
    for field, flag, _env, help_ in FIELDS:
        parser.add_argument(flag, dest=field, type=str, default=None, help=help_)
