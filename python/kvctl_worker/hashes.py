"""The int64 block hashes a node publishes in its KV events, computed the way events.py does.

SGLang 0.5.23's KVCacheEventRecorder publishes, per page,
``namespaced_block_hash(hash_str_to_int64(event_hash_values[i]), namespace_seed)`` where the
event hash values are the plain chained SHA-256 of the page (``node.hash_value``) or, for
cache_salt / LoRA (extra_key) traffic, the namespace-seeded chain (``event_hash_value``). We reuse
the recorder's own helpers so the index is keyed by exactly what the router sees, whether or not
KV events are enabled.
"""
from __future__ import annotations

from typing import Any, List


def _ensure_path_hashes(node: Any, page_size: int) -> None:
    """compute_node_hash_values chains from parent.hash_value: fill ancestors first."""
    from sglang.srt.mem_cache.utils import compute_node_hash_values

    path = []
    cur = node
    while cur is not None and cur.parent is not None and cur.hash_value is None:
        path.append(cur)
        cur = cur.parent
    for n in reversed(path):
        n.hash_value = compute_node_hash_values(n, page_size)


def published_hashes(recorder: Any, node: Any) -> List[int]:
    from sglang.srt.disaggregation.kv_events import namespaced_block_hash
    from sglang.srt.mem_cache.utils import hash_str_to_int64

    _ensure_path_hashes(node, recorder.page_size)
    values = recorder._node_event_hash_values(node)
    seed = recorder._namespace_seed(node)
    pages = -(-len(node.key) // recorder.page_size)
    return [
        namespaced_block_hash(hash_str_to_int64(v), namespace_seed=seed)
        for v in values[:pages]
    ]
