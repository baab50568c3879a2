"""Warm: storage backend -> host pool -> radix tree (-> GPU)."""
from __future__ import annotations

from .ack import Ack
from .codec import CommandError


def warm(handler, st, cmd) -> Ack:
    raise CommandError("command.type", "Warm not available yet")
