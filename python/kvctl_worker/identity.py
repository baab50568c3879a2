"""The worker id every Ack carries, from one place.

The NATS subscriber (tokenizer process) and the scheduler side both read it here:
``set_worker_id("w0")`` wins; otherwise the ``KVCTL_WORKER_ID`` environment variable (read at call
time, so a value exported before the scheduler processes fork reaches every rank); else ``None``.
"""
from __future__ import annotations

import os
from typing import Optional

_worker_id: Optional[str] = None


def set_worker_id(worker_id: Optional[str]) -> None:
    global _worker_id
    _worker_id = worker_id
    if worker_id is not None:
        # scheduler processes started after this call inherit it through the environment
        os.environ["KVCTL_WORKER_ID"] = worker_id


def get_worker_id() -> Optional[str]:
    return _worker_id if _worker_id is not None else os.environ.get("KVCTL_WORKER_ID")
