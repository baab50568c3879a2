"""Which tree core a kvctl worker runs on, and why.

SGLang 0.5.23 builds its radix tree on a Rust core by default (``rust_tree_core/``, picked in
``unified_cache/tree_core_registry.py``); the Python core (``UnifiedTreeCore``) is its fallback.
kvctl drives the Rust core through the adapter's own API (``RustUnifiedTreeCore``; ``rust_core/``)
and the Python core through the hooks of patches 0002 and 0007. Every command with every option
runs exactly on the Python core. On the Rust core a command runs exactly or is not offered there:

| command | Rust core | what it uses, or the adapter method it lacks |
|---|---|---|
| Cache | exact | inc/dec_host_lock_ref (HiCache; path backed up first), inc/dec_lock_ref without |
| Inspect | exact | read-only: match_full_device_prefix, collect_path_info, is_backuped |
| Pause, ToolStart | exact | host locks, backup_node_for_write_back, demote; locks read from walk_for_kv_canary |
| RenewLease, ToolEnd, Prefetch | exact | the holds; load_back + loading_check |
| RevokeLease | exact with purge=false | purge=true needs a targeted host-leaf eviction (below) |
| Warm | exact | match_prefix, insert_host, load_back (what it does on the Python core too) |
| Prune | Python core | removes a subtree from every tier: no targeted host-leaf eviction |
| Think | Python core | splits at the reasoning and takes its host copies back |

The adapter's only host-freeing steps are ``drive_host_eviction`` (victims chosen by the host LRU),
``drop_subtree_no_host`` (only below an un-backed-up device leaf) and ``reset``; the Python core's
``_evict_host_leaf`` (one named host leaf) and ``_release_full_host_duplicate`` (one node's host
copy) have no counterpart. Splitting a node goes through ``match_prefix``, which also refreshes
the path's LRU recency; the Python core's ``_split_node`` does not. The Rust binding's
``inspection`` build has such methods (``inspect_evict_component``, ``inspect_get_child_node_ids``,
lock counts); production wheels do not ship it.

So the worker stays on the Rust core unless ``--kv-control-config`` ``commands`` accepts Prune or
Think (the default accepts every command): then SGLang's own fallback picks the Python core and
logs why (patch 0003). A RevokeLease with ``purge: true`` on the Rust core is rejected naming
``command.purge``, with nothing changed.
"""
from __future__ import annotations

from typing import Optional

# Commands the Rust core cannot carry exactly, with the adapter methods they lack.
PYTHON_ONLY = {
    "Prune": "it removes a subtree from every tier and the Rust core's adapter has no targeted "
             "host-leaf eviction (the Python core's _evict_host_leaf)",
    "Think": "it splits nodes at the reasoning blocks and takes their host copies back, and the "
             "Rust core's adapter has no split without an LRU refresh (_split_node) and no "
             "host-copy release (_release_full_host_duplicate, _evict_host_leaf)",
}

PURGE_ON_RUST = ("purge=true removes the lease's blocks from the host tier, and the Rust tree "
                 "core's adapter has no targeted host-leaf eviction (the Python core's "
                 "_evict_host_leaf): send purge=false (the blocks stay to the cache's own eviction), "
                 "or accept Prune or Think in --kv-control-config commands to run on the Python core")


def python_core_reason(commands) -> Optional[str]:
    """Why the accepted ``commands`` need SGLang's Python tree core, or None when the Rust core
    carries every one of them."""
    needs = sorted(c for c in commands if c in PYTHON_ONLY)
    if not needs:
        return None
    why = "; ".join(f"{c}: {PYTHON_ONLY[c]}" for c in needs)
    return f"kvctl accepts {', '.join(needs)}, which need the Python TreeCore ({why})"


def current_reason() -> Optional[str]:
    """For patch 0003: the reason kvctl needs the Python core in this process, or None (kvctl off,
    or every accepted command runs on the Rust core)."""
    from . import config

    cfg = config.current()
    return None if cfg is None else python_core_reason(cfg.commands)
