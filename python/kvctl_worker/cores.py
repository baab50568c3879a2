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
| Prune, RevokeLease | exact | demote / drop_subtree_no_host, then drive_host_eviction with every other host node host-locked (rust_core/purge.py); Prune's split through match_prefix |
| Warm | exact | match_prefix, insert_host, load_back (what it does on the Python core too) |
| Think | Python core | transient marks: no per-node write-through or eviction hook in the core |

The adapter's only host-freeing steps are ``drive_host_eviction`` (victims chosen by the host LRU),
``drop_subtree_no_host`` (only below an un-backed-up device leaf) and ``reset``; the Python core's
``_evict_host_leaf`` (one named host leaf) has no counterpart, so a purge host-locks every other
node holding a host copy while it asks ``drive_host_eviction`` for one node's tokens
(``rust_core/purge.py``). Splitting a node goes through ``match_prefix``, which also refreshes the
path's LRU recency; the Python core's ``_split_node`` does not (a Prune's kept prefix counts as
just used on the Rust core; the acks and the KV events are the same).

Think(transient=false) is a purge (it would run here as Prune does); Think(transient=true) is not
exact here. It takes back the host copy of a node still on the GPU (the Python core's
``_release_full_host_duplicate``): the adapter frees a host copy of a device-resident node only
inside ``drive_host_eviction``'s duplicate reclaim, which runs under write_back alone, so under
write_through nothing frees it. It also keeps a transient node off the host from then on (patch
0007: ``_should_backup_after_insert`` and ``evict_device_leaf`` on the Python core), decisions
the Rust core takes inside the extension (``begin_insert``, ``evict_device_leaf``) with no
per-node hook. The Rust binding's ``inspection`` build has finer methods
(``inspect_evict_component``, lock counts); production wheels do not ship it.

So the worker stays on the Rust core unless ``--kv-control-config`` ``commands`` accepts Think
(the default accepts every command): then SGLang's own fallback picks the Python core and logs
why (patch 0003).
"""
from __future__ import annotations

from typing import Optional

# Commands the Rust core cannot carry exactly, with the adapter methods they lack.
PYTHON_ONLY = {
    "Think": "transient=true takes back the host copy of a node still on the GPU and keeps it off "
             "the host, and the Rust core's adapter has no host-copy release under write_through "
             "(the Python core's _release_full_host_duplicate) and no per-node hook where the "
             "extension decides a backup (_should_backup_after_insert, evict_device_leaf)",
}


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
