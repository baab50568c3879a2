"""Warm: load pages from the storage tier back into the tree (host, or on to the GPU)."""
from __future__ import annotations

from ..ack import Ack
from ..codec import Command
from ..warm import warm
from .context import CommandContext


class WarmCommands:
    types = ("Warm",)

    def __init__(self, ctx: CommandContext):
        self.ctx = ctx

    def run(self, cmd: Command) -> Ack:
        return warm(self.ctx.cache, self.ctx.unified(cmd), cmd)
