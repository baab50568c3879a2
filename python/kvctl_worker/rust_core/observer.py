"""The kvctl observer of a Rust tree core (patch 0006 creates it in ``RustUnifiedTreeCore``).

The Python core's observer is told of every node created, split and removed (patches 0001,
0002). The Rust core tells nothing; what it offers is its event queue. So this observer:

- keeps every batch the core's recorder drains (``on_events``) and folds them into the block
  index in order, before anything reads it (every reader drains first) or once FOLD_EVERY of them
  wait, so the request path pays a list append per drain; while kvctl is on the core records
  events even when SGLang publishes none (patch 0006), and ``tick`` drains them then, so the
  queue never grows;
- drains the queue itself before a command reads the index (``sync``) and hands that batch on
  to SGLang's next drain, so the publisher loses nothing and sees it in order;
- notices the splits of held nodes there too (a held node whose span shrank: the Python core's
  ``on_split`` re-counts both halves, done here on the next sync, before any command or tick
  reads the pins).

Think (transient marks) runs on the Python core only, so nothing is ever transient here.
"""
from __future__ import annotations

import logging
from typing import Any

from ..cores import PYTHON_ONLY
from ..observer import KvctlState, Observer
from .blocks import BlockIndex
from .moves import RustMoves
from .nodes import RustNodes
from .ops import RustOps

logger = logging.getLogger(__name__)

# Drained batches kept before the block index reads them; every reader drains first, which reads
# them all, in order.
FOLD_EVERY = 64


class RustObserver(Observer):
    enabled = True

    def __init__(self, core: Any, cfg, publishes: bool):
        self.core = core
        self.publishes = publishes
        self.pending: list = []
        self.unfed: list = []  # drained batches the block index has not read yet (_fold)
        self._syncing = False
        self.blocks = BlockIndex(core.page_size)
        nodes = RustNodes(core, self.blocks, self.sync)
        ops = RustOps(core, nodes)
        self.state = KvctlState(core, cfg, index=nodes, ops=ops, moves=RustMoves(nodes, ops))
        self.state.sync = self.before_command
        self.state.tick = self.tick
        refused = sorted(set(PYTHON_ONLY) - set(cfg.commands))
        logger.info("kvctl: on SGLang's Rust tree core; accepts %s (not %s: they need the Python "
                    "tree core, see kvctl cores.py)", ", ".join(sorted(cfg.commands)) or "nothing",
                    ", ".join(refused))

    # ---- what the core's recorder calls ---------------------------------------------------
    def on_events(self, raw: list, events: list) -> list:
        self.unfed.append((raw, events))
        if len(self.unfed) >= FOLD_EVERY:
            self._fold()
        if self.pending:
            events = self.pending + events
            self.pending = []
        return events

    def on_host_node(self, node_id: Any, how: str) -> None:
        """Host-only blocks are found again through the node that holds them: read the events
        this step queued (its node's blocks) and remember the node for them."""
        self._drain()
        blocks = self.blocks
        blocks.note_host_node(blocks.last_gpu_removed if how == "demoted" else blocks.last_cpu_stored,
                              node_id)

    def on_reset(self, tree: Any) -> None:
        st = self.state
        st.index.clear()
        st.pins.clear()
        st.sessions.clear()
        st.prefetch.clear()

    # ---- kvctl's own drains ------------------------------------------------------------------
    def _fold(self) -> None:
        """The drained batches into the block index, in order (one tight loop for many of them:
        what the request path pays per drain is a list append)."""
        unfed, self.unfed = self.unfed, []
        feed = self.blocks.feed
        for raw, events in unfed:
            feed(raw, events)

    def _drain(self) -> None:
        got = self.core.kv_events.take()
        if self.publishes:
            self.pending = got  # SGLang's next take_events returns them first
        self._fold()

    def sync(self) -> None:
        """The index as the core is now, and every held node's blocks where they are now (every
        lookup starts here)."""
        self._drain()
        if self._syncing or not self.state.pins.protected:
            return
        self._syncing = True
        try:
            st = self.state
            nodes = st.index
            for n, left in nodes.refresh(list(st.pins.protected.values())):
                moved = {id(m): m for m in nodes.resolve(left).values()}
                for m in moved.values():
                    st.pins.recount(m)
                st.pins.recount(n)
        finally:
            self._syncing = False

    def before_command(self) -> None:
        """A command starts from the core as it is; the handles no hold needs go (a command's
        lookups make them again), so their table stays as small as what kvctl holds."""
        self.sync()
        self.state.index.forget_unheld()

    def tick(self) -> None:
        if self.state.pins.protected:
            self.sync()
        elif not self.publishes:
            self._drain()
        self.state.index.forget_unheld()
