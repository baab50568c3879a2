"""Warm: HiCache storage backend -> host pool -> radix tree (-> GPU).

The pages are placed with their tokens: ``block_keys`` must be the storage-key chain of the
sequence from its first page (what the router's index holds), and ``token_ids`` its tokens. The
keys are recomputed from the tokens with SGLang's own chain (``get_storage_hash_str``, the
function ``compute_node_hash_values`` uses for ``node.hash_value``, which is what the storage
backend is keyed by); a mismatch is rejected naming the first bad key, with nothing changed.
Without ``token_ids`` the worker uses the tokens of the tree path that already carries the keys,
or rejects.

The fetch is SGLang's own storage read (``storage_backend.batch_exists`` / ``batch_get_v2`` into
host pages from ``mem_pool_host.alloc``), the insert is ``UnifiedTreeCore.insert_host`` (what the
storage prefetch uses; it records BlockStored CPU_PINNED), and ``target_tier: "GPU"`` then goes
through ``load_back`` (BlockStored GPU). Runs synchronously on the scheduler thread.
"""
from __future__ import annotations

from array import array
from typing import List, Optional

from . import tiers as T
from .ack import Ack
from .codec import CommandError


def _chain(tokens: List[int], page_size: int) -> List[str]:
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    if not tokens:
        return []
    return list(get_storage_hash_str(RadixKey(array("q", tokens)), None, page_size=page_size))


def _known_tokens(core, keys: List[str], page_size: int) -> Optional[List[int]]:
    """Tokens of the tree path whose storage keys are ``keys`` from its first page, if any."""
    last = keys[-1]
    stack = [core.root_node]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        hv = getattr(n, "hash_value", None) or []
        if last in hv:
            i = hv.index(last)
            toks: List[int] = list(n.key.token_ids[: (i + 1) * page_size])
            cur = n.parent
            while cur is not None and cur is not core.root_node:
                toks = list(cur.key.token_ids) + toks
                cur = cur.parent
            return toks
    return None


def _walk(core, tokens: List[int], page_size: int):
    """Deepest node whose root path is a full-node prefix of ``tokens``; (node, matched)."""
    from sglang.srt.mem_cache.radix_cache import RadixKey

    node, pos = core.root_node, 0
    key = RadixKey(array("q", tokens))
    while pos < len(tokens):
        child = node.children.get(key[pos:].child_key(page_size))
        if child is None:
            break
        n = child.key.match(key[pos:], page_size=page_size)
        if n < len(child.key):
            break
        node, pos = child, pos + n
    return node, pos


def warm(handler, st, cmd) -> Ack:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import hash_str_to_int64

    cache = handler.cache
    core = cache.tree_core
    f = cmd.fields
    keys, toks, target = f["block_keys"], f["token_ids"], f["target_tier"]
    ctrl = getattr(cache, "cache_controller", None)
    backend = getattr(ctrl, "storage_backend", None) if ctrl is not None else None
    if backend is None or not getattr(cache, "enable_storage", False):
        raise CommandError("command.type", "Warm needs a HiCache storage backend on this worker")
    ps = st.index.page_size
    if not keys:
        return Ack(type="Warm", status="noop")
    if toks is None:
        toks = _known_tokens(core, keys, ps)
        if toks is None:
            raise CommandError("command.token_ids", "missing, and this worker does not know the "
                               "block_keys: pages cannot be placed in the prefix tree without tokens")
    if len(toks) != len(keys) * ps:
        raise CommandError("command.token_ids", f"expected {len(keys)} x {ps} = {len(keys) * ps} "
                           f"tokens for {len(keys)} block_keys, got {len(toks)}")
    expected = _chain(toks, ps)
    for i, (k, e) in enumerate(zip(keys, expected)):
        if k != e:
            raise CommandError(f"command.block_keys[{i}]", "does not match token_ids (the storage key "
                               "recomputed from the tokens differs)")

    # what the tree already holds (any tier) is not fetched again
    cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", toks))))  # splits at page edges
    anchor, have = _walk(core, toks, ps)
    have_pages = have // ps
    need = keys[have_pages:]
    tiers: dict = {}
    got = 0
    missing_keys: List[str] = []
    inserted = None
    reason = None
    if need:
        avail = backend.batch_exists(need)
        missing_keys = need[avail:]
        if avail:
            host = ctrl.mem_pool_host
            idx = host.alloc(avail * ps)
            if idx is None:
                cache.evict_host(avail * ps)
                idx = host.alloc(avail * ps)
            if idx is None:
                return Ack(type="Warm", status="error", requested=len(keys), skipped=have_pages,
                           reason="host pool full: nothing fetched, state unchanged")
            try:
                res = backend.batch_get_v2([PoolTransfer(name=PoolName.KV, host_indices=idx,
                                                         keys=need[:avail])])
                oks = next(iter(res.values())) if res else []
                while got < avail and got < len(oks) and oks[got]:
                    got += 1
                missing_keys = need[got:]
                if got:
                    ins = core.insert_host(anchor.id, RadixKey(array("q", toks[have:have + got * ps])),
                                           idx[: got * ps], list(need[:got]))
                    cache._apply_cache_actions(ins.cache_actions)
                    if ins.host_insert_dropped:
                        reason = "the tree refused the host pages (un-backed-up prefix under write-through)"
                        host.free(idx[: got * ps])
                        got = 0
                    else:
                        if ins.prefix_len:
                            host.free(idx[: ins.prefix_len])
                        inserted = ins.inserted_host_node
            finally:
                if got * ps < len(idx):
                    host.free(idx[got * ps:])
    if got:
        tiers["CPU_PINNED"] = got
    if inserted is not None and target == "GPU":
        if T.load_path(cache, core.node_by_id(inserted)):
            tiers["GPU"] = got
        else:
            reason = "fetched to host; load to GPU refused (device pool full?)"
    missing = [hash_str_to_int64(k) for k in missing_keys]
    if got == 0:
        status = "noop"
    elif missing_keys or reason:
        status = "partial"
    else:
        status = "applied"
    return Ack(type="Warm", status=status, requested=len(keys), affected=got, skipped=have_pages,
               missing=missing, tiers=tiers, reason=reason,
               detail={"found_pages": got, "already_cached_pages": have_pages,
                       "missing_keys": missing_keys})
