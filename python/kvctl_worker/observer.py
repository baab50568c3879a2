"""The kvctl observer: the one object a patched SGLang tree holds and its hooks call, in the
pattern of SGLang's own KVCacheEventRecorder (mem_cache/events.py): the tree owns it, it needs
nothing back from its owner, and it is a no-op when kvctl is off.

``Observer.create(tree)`` runs in the tree's constructor: it reads the config in effect
(config.current(): SGLang's server args, or what a test set) and returns the shared no-op ``OFF``
when kvctl is off, else an ``ActiveObserver`` holding the tree's kvctl state (block-hash index,
pins, sessions, the command handler). SGLang's Rust tree core has no hook points; it gets a
``rust_core.observer.RustObserver`` (``Observer.create_rust``), which reads the core's KV events.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from . import config as kvctl_config
from .hashes import published_hashes
from .index import BlockHashIndex
from .pins import PinManager
from .prefetch import PrefetchHolds
from .sessions import Sessions
from .tiers import PythonMoves
from .trees import RadixOps, UnifiedOps

logger = logging.getLogger(__name__)


class KvctlState:
    """What the command layer works on: one per tree. ``index`` maps block hashes to nodes,
    ``ops`` protects them, ``moves`` moves them between tiers (tiers.PythonMoves on the Python
    core, rust_core.moves.RustMoves on the Rust one)."""

    def __init__(self, tree: Any, cfg: kvctl_config.KvctlConfig, index: Any = None, ops: Any = None,
                 moves: Any = None):
        self.tree = tree
        self.config = cfg
        self.index = index if index is not None else BlockHashIndex(tree.page_size)
        if ops is None:
            ops = UnifiedOps(tree) if hasattr(tree, "node_by_id") else RadixOps(tree)
        self.moves = moves if moves is not None else PythonMoves()
        self.pins = PinManager(self.index, ops, budget_fraction=cfg.pin_budget_fraction)
        self.sessions = Sessions(self.pins, tool_ttl_s=cfg.tool_ttl_s)
        # Device holds on what Prefetch loaded, until its request holds it (or the hold ends).
        self.prefetch = PrefetchHolds(cfg.prefetch_hold_s, self.moves.taken_over)
        # Transient nodes whose host copy could not go yet (an in-flight write-through or storage
        # backup held it when Think arrived): the scheduler tick retries until it is gone.
        self.transient_host_pending: Dict[int, Any] = {}
        # Whether any node may be transient: device eviction skips its transient scan otherwise.
        self.has_transient = False
        # The scheduler's command handler, made on first use (scheduler_side.handler_of).
        self.handler: Optional[Any] = None

    @property
    def ops(self):
        return self.pins.ops

    def sync(self) -> None:
        """Brings the index up to date before a command reads it (the Rust core's events)."""

    def tick(self) -> None:
        """Once per scheduler loop (the Rust core drains its events when SGLang does not)."""


class Observer:
    """kvctl off: every hook returns at once and nothing is stored."""

    enabled = False
    state: Optional[KvctlState] = None

    @staticmethod
    def create(tree: Any) -> "Observer":
        cfg = kvctl_config.current()
        return OFF if cfg is None else ActiveObserver(tree, cfg)

    @staticmethod
    def create_rust(core: Any, publishes: bool) -> "Observer":
        """For SGLang's Rust tree core (patch 0006): ``publishes`` = SGLang drains and publishes
        the core's KV events itself."""
        cfg = kvctl_config.current()
        if cfg is None:
            return OFF
        from .rust_core.observer import RustObserver

        return RustObserver(core, cfg, publishes)

    def on_events(self, raw: list, events: list) -> list:
        """A drained batch of the Rust core's events; returns what the drain hands on."""
        return events

    def on_host_node(self, node_id: Any, how: str) -> None:
        """The cache demoted a node to host (``how`` "demoted") or inserted a host node
        ("inserted"): the Rust core's observer keeps its id (patch 0008)."""

    def on_node_added(self, tree: Any, node: Any) -> None:
        pass

    def on_split(self, tree: Any, new_node: Any, child: Any, split_len: int) -> None:
        pass

    def on_node_removed(self, tree: Any, node: Any) -> None:
        pass

    def on_reset(self, tree: Any) -> None:
        pass

    def is_transient(self, node: Any) -> bool:
        return False


OFF = Observer()


class ActiveObserver(Observer):
    """kvctl on: keeps the block-hash index, pins and transient marks right through every tree
    mutation (index.py), never raising into SGLang for bookkeeping it cannot do."""

    enabled = True

    def __init__(self, tree: Any, cfg: kvctl_config.KvctlConfig):
        self.state = KvctlState(tree, cfg)
        if hasattr(tree, "node_by_id"):  # a UnifiedTreeCore (a plain RadixCache has no core)
            logger.info("kvctl: on SGLang's Python tree core; accepts %s",
                        ", ".join(sorted(cfg.commands)) or "nothing")

    def on_node_added(self, tree: Any, node: Any) -> None:
        try:
            # published_hashes fills SGLang's own lazily computed node.hash_value (the recorder
            # then reuses it): a block is hashed once whether or not KV events are on.
            self.state.index.add(node, published_hashes(tree.kv_events, node))
        except Exception:  # pragma: no cover - never break the serving path
            logger.exception("kvctl: could not index node %s", getattr(node, "id", "?"))
        parent = getattr(node, "parent", None)
        if parent is not None and getattr(parent, "kvctl_transient", False):
            node.kvctl_transient = True  # what follows transient KV is unusable without it too

    def on_split(self, tree: Any, new_node: Any, child: Any, split_len: int) -> None:
        st = self.state
        st.index.split(new_node, child, split_len)
        new_node.kvctl_receipt = None
        new_node.pin_count = 0
        # a transient node's halves are both transient (split slices, never rehashes)
        new_node.kvctl_transient = getattr(child, "kvctl_transient", False)
        st.pins.recount(new_node)
        st.pins.recount(child)

    def on_node_removed(self, tree: Any, node: Any) -> None:
        st = self.state
        st.index.remove(node)
        if node.pin_count:
            st.pins.forget(node)

    def on_reset(self, tree: Any) -> None:
        st = self.state
        st.index.clear()
        st.pins.clear()
        st.sessions.clear()
        st.prefetch.clear()

    def is_transient(self, node: Any) -> bool:
        return bool(getattr(node, "kvctl_transient", False))


def of(cache_or_tree: Any) -> Observer:
    """The observer of a RadixCache, a UnifiedRadixCache (its tree core's) or a tree core; OFF
    for a tree without one (SGLang's Rust tree core, selected while kvctl is off)."""
    core = getattr(cache_or_tree, "tree_core", None)
    return getattr(core if core is not None else cache_or_tree, "kvctl", OFF)
